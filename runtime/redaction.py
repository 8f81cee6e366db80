"""Keeping API keys out of everything an error carries.

`redact` removes the secrets it is given, every run of 8 or more characters of one (a
provider may echo a key's prefix or suffix), anything shaped like a key (`sk-...`,
`Bearer ...`), and the same for every secret registered here. Adapters register their
key while they live (`register_secret`), so an error made anywhere in the process —
one rebuilt from a pickle in a Ray worker included — is cleaned with the real keys, not
only with key-shaped patterns. The registry holds the keys of live adapters and nothing
else; it has no repr of its keys and cannot be pickled.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from typing import Any

__all__ = ["logger", "redact", "redact_value", "register_secret"]

MASK = "***"
# A run of this many characters of a secret is a leak; shorter runs are too common in
# ordinary text to remove (and a key this short is no key).
MIN_RUN = 8
# Up to this many pieces (a handful of keys), a C-level search per piece beats a set
# lookup per position on a long text.
_FIND_GRAMS = 256
_KEY_PATTERNS = re.compile(
    r"((?<![A-Za-z0-9])sk-[A-Za-z0-9_\-*]{4,}|Bearer\s+[A-Za-z0-9_\-.*]{8,})"
)


class _KnownSecrets:
    """The keys of this process's live adapters, with how many adapters hold each."""

    __slots__ = ("_counts", "_lock", "grams")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.grams: frozenset[str] = frozenset()  # swapped whole: readers take no lock

    def __repr__(self) -> str:
        return f"<known secrets: {len(self._counts)}>"

    def __reduce__(self) -> Any:
        raise TypeError("the secrets registry cannot be pickled")

    def __contains__(self, secret: str) -> bool:
        return secret in self._counts

    def add(self, secret: str) -> None:
        with self._lock:
            held = self._counts.get(secret, 0)
            self._counts[secret] = held + 1
            if not held:  # models are unpickled often on Ray: the pieces are made once
                self.grams = self.grams | _grams(secret)

    def discard(self, secret: str) -> None:
        with self._lock:
            left = self._counts.get(secret, 0) - 1
            if left > 0:
                self._counts[secret] = left
                return
            self._counts.pop(secret, None)
            self.grams = frozenset().union(*map(_grams, self._counts))


_KNOWN = _KnownSecrets()


def register_secret(secret: str, owner: object) -> None:
    """Redact `secret` from every error of this process for as long as `owner` lives."""
    if len(secret) < MIN_RUN:
        return
    _KNOWN.add(secret)
    weakref.finalize(owner, _KNOWN.discard, secret)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` without `secrets`, runs of 8+ characters of them or of a registered key,
    and anything shaped like an API key. Linear in the text (one C-level search per
    8-character piece of a secret), so a whole body is redacted before it is cut."""
    grams = _KNOWN.grams
    for secret in secrets:
        if not secret:
            continue
        if len(secret) < MIN_RUN:
            text = text.replace(secret, MASK)
        elif secret not in _KNOWN:
            grams = grams | _grams(secret)
    if grams and len(text) >= MIN_RUN:
        text = _mask_runs(text, grams)
    return _KEY_PATTERNS.sub(MASK, text)


def redact_value(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """`redact` applied to every string in `value` (dicts, lists and tuples, nested);
    other objects are kept as they are. An unchanged value is returned as it came."""
    if isinstance(value, str):
        out = redact(value, secrets)
        return value if out == value else out
    if isinstance(value, dict):
        pairs = [(redact_value(k, secrets), redact_value(v, secrets)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    if isinstance(value, (list, tuple)):
        items = [redact_value(v, secrets) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def _grams(secret: str) -> frozenset[str]:
    return frozenset(secret[i : i + MIN_RUN] for i in range(len(secret) - MIN_RUN + 1))


def _mask_runs(text: str, grams: frozenset[str]) -> str:
    """Replace every stretch of `text` covered by occurrences of `grams` with the mask."""
    spans: list[tuple[int, int]] = []
    if len(text) < 4 * len(grams) or len(grams) > _FIND_GRAMS:
        # A short text, or many keys (one search per piece would be quadratic): one
        # set lookup per position.
        for at in range(len(text) - MIN_RUN + 1):
            if text[at : at + MIN_RUN] in grams:
                spans.append((at, at + MIN_RUN))
    else:
        for gram in grams:
            at = text.find(gram)
            while at >= 0:
                spans.append((at, at + MIN_RUN))
                at = text.find(gram, at + 1)
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    kept = 0
    start, end = spans[0]
    for s, e in spans[1:]:
        if s <= end:
            end = max(end, e)
            continue
        out += (text[kept:start], MASK)
        kept, start, end = end, s, e
    out += (text[kept:start], MASK, text[end:])
    return "".join(out)


class _RedactingFilter(logging.Filter):
    """Redacts a record's message and traceback: a log line may format an exception
    that is not raygent's (an observer's, a tool's), which nothing redacted before."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER = _RedactingFilter()


def logger(name: str) -> logging.Logger:
    """The named logger, with the filter that redacts its records (raygent logs through
    these only)."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log
