"""Deterministic token counting and a tiny prompt-cache model.

The simulator does not tokenize. A non-empty text counts ``ceil(len(text) / 4)`` tokens
(so at least 1), an empty text 0. Input tokens add :data:`MESSAGE_OVERHEAD` per message
(the system prompt counts as one), the JSON of the tool definitions, and
:data:`MEDIA_TOKENS` per image/document/audio part. Output tokens are those of the
thinking, the text and the tool-call argument strings.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable

from ._types import WireError

MESSAGE_OVERHEAD = 4
MEDIA_TOKENS = 85
CHARS_PER_TOKEN = 4
OPENAI_CACHE_MIN_TOKENS = 1024


def count_tokens(text: str) -> int:
    """Tokens of ``text``: ``ceil(len(text) / 4)``; 0 for the empty string."""
    return -(-len(text) // CHARS_PER_TOKEN)


def cut_text(text: str, tokens: int) -> str:
    """The longest prefix of ``text`` that fits in ``tokens`` tokens."""
    return text[: max(tokens, 0) * CHARS_PER_TOKEN]


class PrefixHasher:
    """A running hash over the units of a prompt (tools, messages or content blocks);
    :meth:`checkpoint` names the prefix hashed so far."""

    __slots__ = ("_hash",)

    def __init__(self, seed: str) -> None:
        self._hash = hashlib.blake2b(seed.encode(), digest_size=16)

    def update(self, data: bytes) -> None:
        self._hash.update(len(data).to_bytes(4, "little"))
        self._hash.update(data)

    def checkpoint(self) -> bytes:
        return self._hash.copy().digest()


class PromptCache:
    """Remembers prompt prefixes (by hash) so a later request sharing one reads it from
    cache. Bounded (least recently used go first) so a long benchmark stays small."""

    def __init__(self, capacity: int = 8192) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def clear(self) -> None:
        self._seen.clear()

    def longest_hit(self, candidates: Iterable[tuple[bytes, int]]) -> int:
        """Token count of the longest candidate prefix seen before (0 if none)."""
        best = 0
        for digest, tokens in candidates:
            if tokens > best and digest in self._seen:
                self._seen.move_to_end(digest)
                best = tokens
        return best

    def store(self, digests: Iterable[bytes]) -> None:
        for digest in digests:
            self._seen[digest] = None
            self._seen.move_to_end(digest)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)


STREAM_CHUNK_TOKENS = 4


def stream_pieces(text: str) -> list[str]:
    """``text`` split into stream deltas of about :data:`STREAM_CHUNK_TOKENS` tokens."""
    size = STREAM_CHUNK_TOKENS * CHARS_PER_TOKEN
    return [text[i : i + size] for i in range(0, len(text), size)]


def content_text(content: object, param: str, keys: tuple[str, ...] = ("text",)) -> tuple[str, int]:
    """A message content's text and tokens, on any wire: a string, or a list of parts
    whose text is under `keys` (the first that is set); other parts (media) count a
    fixed amount. Anything else is the wire's 400 on `param`."""
    if isinstance(content, str):
        return content, count_tokens(content)
    if not isinstance(content, list):
        raise WireError("Invalid message content.", param=param)
    texts: list[str] = []
    tokens = 0
    for part in content:
        text = None
        if isinstance(part, dict):
            text = part.get(keys[0])
            for key in keys[1:]:
                text = text or part.get(key)
        if isinstance(text, str):
            texts.append(text)
            tokens += count_tokens(text)
        else:
            tokens += MEDIA_TOKENS
    return "\n".join(texts), tokens
