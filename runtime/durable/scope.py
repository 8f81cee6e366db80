"""The scope a run lives under: its key (a session's id, or a durable run's id), its
user and its metadata (the store's tenant isolation). Sessions and durable runs of
agents, flows and batch items all name their scope here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raygent.stores import Scope

__all__ = ["run_scope", "scope_of"]


def scope_of(key: str, user_id: str | None, metadata: Any) -> Scope:
    """The scope of a session (or a run) `key`, for the tenant `user_id` / `metadata`."""
    return Scope(key, user_id, dict(metadata or {}))


def run_scope(run_id: str, options: Mapping[str, Any]) -> Scope:
    """A durable run's scope, its tenant named by the run options (`user_id`,
    `metadata`) as they were at its start."""
    return scope_of(run_id, options.get("user_id"), options.get("metadata"))
