"""What session clients and session hosts share: routing, the errors, the wire form of
messages (their JSON array: one schema, encoded and decoded in Rust)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from raygent.backend import (
    AssistantMessage,
    Message,
    RaygentError,
    SystemMessage,
    ToolMessage,
    UserMessage,
    messages_to_json,
)

__all__ = [
    "LeaseExpiredError",
    "SessionHostError",
    "checked",
    "encode_messages",
    "host_names",
    "route",
]


class SessionHostError(RaygentError):
    """The session host could not be reached (it died, or its node), or no longer knew
    the run's lease (it restarted). What the run wrote is stored; a retry may succeed.

    details: host, lease_id (when known).
    """

    code = "SESSION_HOST_UNAVAILABLE"
    category = "store"
    default_retryable = True


class LeaseExpiredError(SessionHostError):
    """The run's lease on its session expired (not renewed within `lease_timeout`, e.g.
    its driver stalled) and another run may have gone ahead; its later writes are refused."""

    code = "SESSION_LEASE_EXPIRED"


_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def checked(messages: Sequence[Message]) -> list[Message]:
    """`messages` as a list, each a raygent message (TypeError otherwise)."""
    listed = list(messages)
    for message in listed:
        if not isinstance(message, _MESSAGE_TYPES):
            raise TypeError(f"not a raygent message: {type(message).__name__}")
    return listed


def encode_messages(messages: Sequence[Message]) -> bytes:
    """Messages as they cross to and from the hosts: their JSON array."""
    return messages_to_json(checked(messages))


def host_names(hosts: int) -> list[str]:
    return [f"raygent-sessions-{i}" for i in range(hosts)]


def route(store_key: str, ref: str, hosts: int) -> int:
    """The host of a conversation: a stable hash (Python's `hash()` is salted per
    process), so that every process of the cluster picks the same host."""
    digest = hashlib.sha256(f"{store_key}\0{ref}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % hosts
