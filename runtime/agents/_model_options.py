"""The model options of a run: the agent's `model_options=` under the call's, and a
prompt-cache key of "session" or "agent" made into the key it stands for."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..models.contract import Model, parts_of
from ..models.tiers import DERIVED_KEYS

__all__ = ["cache_key_for", "run_model_options"]

# Run options that are the run's own, never a model option.
_IGNORED_MODEL_OPTIONS = ("tools", "signal", "response_schema")


def run_model_options(
    agent: str, model: Model, given: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The agent's model options (`given`) under the call's (`options["model_options"]`),
    the prompt-cache key derived where it says "session" or "agent"."""
    merged = {**given, **(options.get("model_options") or {})}
    for key in _IGNORED_MODEL_OPTIONS:
        merged.pop(key, None)
    asked = merged.get("prompt_cache_key") or _model_key(model)
    if asked in DERIVED_KEYS:
        merged["prompt_cache_key"] = cache_key_for(asked, agent, options.get("session_id"))
    return merged


def cache_key_for(kind: str, agent: str, session: str | None) -> str:
    """The prompt-cache key of an agent's runs ("agent": one for them all) or of a
    session's ("session"; a run on no session gets its agent's). Hashed: a session id
    may name a user, and the key goes to the provider."""
    scope = f"{agent}\0{session}" if kind == "session" and session else agent
    return "raygent-" + hashlib.sha256(scope.encode()).hexdigest()[:24]


def _model_key(model: Model) -> object:
    # A fallback model's models, or the model: the first that sets a key.
    for each in parts_of(model):
        key = getattr(each, "prompt_cache_key", None)
        if key is not None:
            return key
    return None
