"""What every HTTP model takes besides its name (`ModelSettings`), and the refusal of a
setting no adapter knows."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, TypedDict

import httpx

from ..pricing import Pricing
from ..rates.limits import RateLimit
from ._names import model_option_hints, unknown_option
from .contract import Capabilities

__all__ = ["ModelSettings", "rate_limit_of", "refuse_unknown"]


def rate_limit_of(settings: ModelSettings) -> RateLimit | None:
    """`rate_limit=`, with `requests_per_minute=` / `tokens_per_minute=` folded in (each
    dimension at the tightest said)."""
    limit = settings.get("rate_limit")
    rpm, tpm = settings.get("requests_per_minute"), settings.get("tokens_per_minute")
    if rpm is None and tpm is None:
        return limit
    short = RateLimit(requests_per_minute=rpm, tokens_per_minute=tpm)
    return short.tightest(limit) if limit is None else limit.tightest(short)


class ModelSettings(TypedDict, total=False):
    """What every HTTP model takes besides its name (defined once for all adapters)."""

    api_key: str | None
    base_url: str | None
    capabilities: Capabilities | None
    pricing: Pricing | None
    timeout: float | httpx.Timeout | None
    headers: Mapping[str, str] | None
    max_concurrency: int | None
    rate_limit: RateLimit | None
    requests_per_minute: float | None
    tokens_per_minute: float | None
    http_client: httpx.AsyncClient | None


def refuse_unknown(cls: type, typed: type, settings: Mapping[str, Any]) -> None:
    """`UnknownOptionError` (a TypeError) for a setting the adapter `cls` does not know (a
    misspelt one would be silently ignored), naming the closest it knows, or saying
    where a model option given here belongs (`max_tokens` is sent per request). The
    known names come from the settings TypedDict `typed` and the adapter's own keywords,
    so they cannot drift."""
    known = set(typed.__required_keys__) | set(typed.__optional_keys__)  # type: ignore[attr-defined]
    unknown = [name for name in settings if name not in known]
    if not unknown:
        return
    own = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    keywords = [n for n, p in own.items() if p.kind is p.KEYWORD_ONLY]
    hints = model_option_hints(to=" to raygent.agent(...) or to a call (sent per request)")
    elsewhere = {n: hint for n, hint in hints.items() if n not in known and n not in keywords}
    raise unknown_option(
        unknown[0],
        sorted(known | set(keywords)),
        subject=f"{cls.__name__}()",
        what="setting",
        elsewhere=elsewhere,
    )
