"""Attachments: images and text documents added to a run's input message.

`attachments=[...]` on `execute` / `stream` takes, per item, either

- a shorthand: a URL or a local path (a `str` or `os.PathLike`); the extension says
  image (`.png .jpg .jpeg .gif .webp`) or text (`.txt .md .csv .json ...`), or
- the tagged form, which says it explicitly:
  `{"type": "image" | "text", "source": "https://..." | "./file" |
  {"base64": ..., "media_type": ...} | {"absolute_path": ...}, "name": optional}`.

Images become `ImagePart`s, documents a `TextPart` wrapped in
`<document name="...">...</document>`; they go before the input message's own content.
What may be read or downloaded is the `AttachmentPolicy`'s to say; a refusal is an
`OutboundPolicyError` on the result, and the run makes no request.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import AttachmentError
from ._outbound import OutboundPolicy, shown_url

__all__ = [
    "Attachment",
    "AttachmentLike",
    "AttachmentPolicy",
    "InlineSource",
    "OutboundPolicy",
    "PathSource",
    "UrlSource",
    "parse_attachment",
    "parse_attachments",
]

Kind = Literal["image", "text"]
AttachmentLike = str | os.PathLike[str] | Mapping[str, Any]

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
TEXT_SUFFIXES = frozenset(
    {
        *(".txt", ".text", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl"),
        *(".yaml", ".yml", ".toml", ".xml", ".html", ".htm", ".log", ".ini", ".cfg", ".py"),
    }
)


class AttachmentPolicy(BaseModel):
    """What attachments may read and download, on the agent or per call.

    - `allow_remote_fetch`: download text documents given by URL (off by default). Image
      URLs are never downloaded here: they go to the provider as URL parts, and the
      provider fetches them; their scheme, host allowlist and literal addresses are
      still checked against `outbound`.
    - `outbound`: the `OutboundPolicy` of every download.
    - `allowed_roots`: local files must resolve (symlinks followed) inside one of these
      folders; None means the working directory.
    - `allow_bare_local_paths`: whether a plain string (shorthand, or a tagged `source`
      string) may name a local file; when False only `{"absolute_path": ...}` may.
    - `max_file_bytes`: the size cap of a local file (20 MiB).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    allow_remote_fetch: bool = False
    outbound: OutboundPolicy = Field(default_factory=OutboundPolicy)
    allowed_roots: tuple[Path, ...] | None = None
    allow_bare_local_paths: bool = True
    max_file_bytes: int = Field(default=20 * 1024 * 1024, gt=0)


@dataclass(frozen=True)
class UrlSource:
    url: str


@dataclass(frozen=True)
class PathSource:
    """A local file; `bare` when it came as a plain string rather than `absolute_path`."""

    path: str
    bare: bool


@dataclass(frozen=True)
class InlineSource:
    """Base64 data, checked to decode, with its media type."""

    data: str
    media_type: str


@dataclass(frozen=True)
class Attachment:
    """One parsed attachment: what it is, where it comes from, the name it is shown by."""

    kind: Kind
    source: UrlSource | PathSource | InlineSource
    name: str


class _Base64(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base64: str
    media_type: str


class _AbsolutePath(BaseModel):
    model_config = ConfigDict(extra="forbid")
    absolute_path: str


class _Tagged(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Kind
    source: str | _Base64 | _AbsolutePath
    name: str | None = None


def parse_attachments(items: Iterable[AttachmentLike]) -> list[Attachment]:
    """Parse every item (AttachmentError on the first that does not parse)."""
    if isinstance(items, (str, bytes, Mapping, os.PathLike)):
        raise AttachmentError("attachments= takes a list", attachment=_shown(items))
    return [parse_attachment(item) for item in items]


def parse_attachment(item: AttachmentLike) -> Attachment:
    """One shorthand string / path, or one tagged mapping."""
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if isinstance(item, str):
        source = _string_source(item)
        return Attachment(kind=_kind_of(item, source), source=source, name=_name_of(source))
    if isinstance(item, Mapping):
        return _tagged(item)
    raise AttachmentError(
        f"an attachment is a string, a path or a mapping, not {type(item).__name__}",
        attachment=_shown(item),
    )


def _tagged(item: Mapping[str, Any]) -> Attachment:
    try:
        tagged = _Tagged.model_validate(dict(item))
    except ValidationError as exc:
        issues = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        shown = _shown(item)
        raise AttachmentError(f"not a valid attachment: {issues}", attachment=shown) from None
    raw = tagged.source
    source: UrlSource | PathSource | InlineSource
    if isinstance(raw, str):
        source = _string_source(raw)
    elif isinstance(raw, _AbsolutePath):
        given = raw.absolute_path
        if not Path(given).is_absolute():
            raise AttachmentError(f"absolute_path is not absolute: {given!r}", attachment=given)
        source = PathSource(given, bare=False)
    else:
        source = _inline(raw, tagged.type)
    return Attachment(kind=tagged.type, source=source, name=tagged.name or _name_of(source))


def _inline(raw: _Base64, kind: Kind) -> InlineSource:
    try:
        base64.b64decode(raw.base64, validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentError("base64 data does not decode", attachment="base64") from None
    if kind == "image" and not raw.media_type.startswith("image/"):
        raise AttachmentError(
            f"an image needs an image/* media type, not {raw.media_type!r}", attachment="base64"
        )
    return InlineSource(data=raw.base64, media_type=raw.media_type)


def _string_source(text: str) -> UrlSource | PathSource:
    if not text:
        raise AttachmentError("an empty string is not an attachment", attachment="")
    return UrlSource(text) if "://" in text else PathSource(text, bare=True)


def _suffix(source: UrlSource | PathSource) -> str:
    if isinstance(source, UrlSource):
        try:
            return PurePosixPath(urlsplit(source.url).path).suffix.lower()
        except ValueError:
            return ""
    return Path(source.path).suffix.lower()


def _kind_of(text: str, source: UrlSource | PathSource) -> Kind:
    suffix = _suffix(source)
    if suffix in IMAGE_TYPES:
        return "image"
    if suffix in TEXT_SUFFIXES:
        return "text"
    raise AttachmentError(
        f"cannot tell whether {_shown(text)} is an image or text by its extension "
        f"({suffix or 'none'}): use the tagged form {{'type': ..., 'source': ...}}",
        attachment=_shown(text),
    )


def _name_of(source: UrlSource | PathSource | InlineSource) -> str:
    if isinstance(source, PathSource):
        return Path(source.path).name
    if isinstance(source, UrlSource):
        parts = urlsplit(source.url)
        return PurePosixPath(parts.path).name or parts.hostname or "document"
    return "attachment"


def _shown(item: Any) -> str:
    """An attachment as reports show it: never a URL's query, never a body of data."""
    if isinstance(item, Mapping):
        return f"tagged attachment (type={item.get('type')!r})"
    text = str(item)
    if "://" in text:
        return shown_url(text)
    return text if len(text) <= 200 else text[:200] + "..."


_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniffed_type(data: bytes) -> str | None:
    """An image's media type by its first bytes (PNG, JPEG, GIF, WebP); None if none."""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def media_type_of(path: str, data: bytes) -> str:
    """An image's media type: by its first bytes, else by extension (`image/png`)."""
    return sniffed_type(data) or IMAGE_TYPES.get(Path(path).suffix.lower(), "image/png")
