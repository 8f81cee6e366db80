"""The model options of a run: the agent's `model_options=` (checked when the agent is
built) under the call's (their names checked once per call), and a prompt-cache key of
"session" or "agent" made into the key it stands for."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidOptionsError
from ..models._names import check_model_options
from ..models.contract import Model, ModelOptions, parts_of
from ..models.tiers import DERIVED_KEYS

__all__ = ["agent_model_options", "cache_key_for", "run_model_options"]

# Run options that are the run's own, never a model option.
_IGNORED_MODEL_OPTIONS = ("tools", "signal", "response_schema")


def agent_model_options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """An agent's `model_options=`, checked once, when the agent is built: a name no
    model option has raises `UnknownOptionError`, a value of the wrong kind
    `InvalidOptionsError` (nothing is left to fail on every run)."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise TypeError(f"model_options= takes a mapping, not {type(given).__name__}")
    check_model_options(given, subject="raygent.agent(model_options=...)")
    kept = {k: v for k, v in given.items() if k not in _IGNORED_MODEL_OPTIONS}
    try:
        ModelOptions(**kept)
    except ValidationError as exc:
        raise InvalidOptionsError(
            f"raygent.agent(model_options=...): {_issues(exc)}", option="model_options"
        ) from None
    return dict(given)


def _issues(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e['input']!r})"
        for e in exc.errors(include_url=False)
    )


def run_model_options(
    agent: str, model: Model, given: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The agent's model options (`given`, checked when it was built) under the call's
    (`options["model_options"]`, whose names are checked here), the prompt-cache key
    derived where it says "session" or "agent"."""
    call = options.get("model_options")
    if call:
        check_model_options(call, subject="the call's model_options")
    merged = {**given, **(call or {})}
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
