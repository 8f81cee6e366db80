"""What a cached reply is keyed on: a hash of what the request would send."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import pydantic_core

from ..messages import Message
from ..models.contract import Model, ModelOptions, as_provider_model

__all__ = ["KEY_VERSION", "request_key"]

KEY_VERSION = "1"  # bumped when what the key covers changes: old entries are then missed
# Body fields that do not change the answer: how it is delivered, not what it says.
_DELIVERY = ("stream", "stream_options")


def request_key(model: Model, messages: Sequence[Message], options: ModelOptions) -> str | None:
    """The key of this request to `model`, or None when it cannot be cached: the model
    does not say what it sends (a test double), or saying it fails (the adapter's own
    request raises the error then). A fallback is keyed model by model (the request
    path hands the cache one model at a time).

    The key covers the provider, the endpoint (the adapter's kind and base URL), the
    model's name and the exact JSON body the adapter sends, less the stream fields: a
    `stream()` and a `complete()` of one request share their entry. The API key is not
    part of it (a reply does not depend on who pays); use a namespace to keep tenants
    apart.
    """
    provider = as_provider_model(model)
    if provider is None:
        return None
    try:
        body: dict[str, Any] = dict(provider.request_body(messages, options, stream=False))
    except Exception:
        return None
    for name in _DELIVERY:
        body.pop(name, None)
    kind = type(model)
    head = [
        KEY_VERSION,
        model.provider,
        f"{kind.__module__}.{kind.__qualname__}",
        getattr(model, "base_url", ""),
        model.name,
    ]
    digest = hashlib.sha256(pydantic_core.to_json(head))
    digest.update(b"\n")
    digest.update(pydantic_core.to_json(body))
    return digest.hexdigest()
