"""Anthropic's server-side compaction, as the simulator speaks it.

A request whose ``context_management.edits`` hold a ``compact_20260112`` edit (sent with
the ``anthropic-beta: compact-2026-01-12`` header, as the API requires) and whose input
reaches the edit's trigger (150,000 input tokens by default, at least 50,000) is
answered with a ``compaction`` block first: a summary of the conversation, sealed in its
``encrypted_content``. The reply's turn then reads only the system prompt, the tools and
the summary: the top-level usage counts that, and ``usage.iterations`` has the
compaction's own entry (the context it closed, the summary it wrote) before the
message's. With ``pause_after_compaction`` the reply is the block alone, ``stop_reason``
"compaction" (the reply the rules chose for the request is not sent).

A request that sends a compaction block back is read from the latest one on, as the API
does: what precedes it is dropped; a block whose seal does not match its content (it was
not sent back verbatim) is refused with a 400.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ._tokens import count_tokens
from ._types import Compacted, WireError

__all__ = [
    "COMPACT_BETA",
    "check_beta",
    "compacted",
    "compaction_edit",
    "iterations",
    "replayed",
    "seal",
]

COMPACT_BETA = "compact-2026-01-12"
EDIT_TYPE = "compact_20260112"
DEFAULT_TRIGGER = 150_000
MIN_TRIGGER = 50_000
_SUMMARY_CHARS = 400


def compaction_edit(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's compact edit, checked as the API checks it (400 otherwise)."""
    config = body.get("context_management")
    if config is None:
        return None
    edits = config.get("edits") if isinstance(config, dict) else None
    if not isinstance(edits, list):
        raise WireError("context_management.edits: Input should be a valid list")
    found = [e for e in edits if isinstance(e, dict) and e.get("type") == EDIT_TYPE]
    if not found:
        return None
    edit = found[0]
    trigger = edit.get("trigger") or {"type": "input_tokens", "value": DEFAULT_TRIGGER}
    value = trigger.get("value") if isinstance(trigger, dict) else None
    if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens":
        raise WireError("context_management.edits.0.trigger.type: must be 'input_tokens'")
    if not isinstance(value, int) or isinstance(value, bool) or value < MIN_TRIGGER:
        raise WireError(f"context_management.edits.0.trigger.value: must be at least {MIN_TRIGGER}")
    return {**edit, "trigger": trigger}


def check_beta(body: object, headers: Mapping[str, str]) -> None:
    """A compact edit without its beta header is refused, as the API refuses it."""
    if not isinstance(body, dict) or compaction_edit(body) is None:
        return
    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    if COMPACT_BETA not in betas:
        raise WireError(
            f"context_management: the {EDIT_TYPE} edit needs the beta header"
            f" 'anthropic-beta: {COMPACT_BETA}'"
        )


def seal(content: str) -> str:
    """The opaque value a block carries, so a block changed on the way back is seen."""
    return "sim-seal-" + hashlib.blake2b(content.encode(), digest_size=12).hexdigest()


def replayed(messages: list[Any]) -> list[Any]:
    """The messages from the latest compaction block on (the block's turn starting at
    it): what the API reads. A block that was not sent back verbatim is a 400."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        at = [
            k
            for k, b in enumerate(content)
            if isinstance(b, dict) and b.get("type") == "compaction"
        ]
        if not at:
            continue
        block = content[at[-1]]
        summary = block.get("content")
        if summary is not None and block.get("encrypted_content") != seal(str(summary)):
            raise WireError(
                f"messages.{index}.content.{at[-1]}: the compaction block was not sent back"
                " as it was returned",
                param="messages",
            )
        return [{**message, "content": content[at[-1] :]}, *messages[index + 1 :]]
    return messages


def compacted(
    edit: dict[str, Any], total: int, kept_tokens: int, last_user: str | None
) -> Compacted | None:
    """The compaction a request of `total` input tokens triggers (None below the
    trigger); `kept_tokens` is what the turn reads besides the summary (system, tools)."""
    if total < edit["trigger"]["value"]:
        return None
    about = (last_user or "").strip()[-_SUMMARY_CHARS:]
    summary = (
        f"Summary of the conversation so far ({total} tokens). The user's last message"
        f" ends: {about}"
    )
    block = {"type": "compaction", "content": summary, "encrypted_content": seal(summary)}
    return Compacted(
        block=block,
        closed_tokens=total,
        summary_tokens=count_tokens(summary),
        after_tokens=count_tokens(summary) + kept_tokens,
        pause=bool(edit.get("pause_after_compaction")),
    )


def iterations(done: Compacted, output_tokens: int) -> list[dict[str, Any]]:
    """`usage.iterations`: the compaction's own entry, then the message's (if sampled)."""
    entries = [_entry("compaction", done.closed_tokens, done.summary_tokens)]
    if not done.pause:
        entries.append(_entry("message", done.after_tokens, output_tokens))
    return entries


def _entry(kind: str, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "type": kind,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
