"""Parsed attachments into content parts, under the attachment policy.

Local files are checked and read here, once: an image file goes on as base64 data, so
the adapter never opens a path that was not checked (nor one swapped in after the
check). Text given by URL is downloaded by the guarded fetcher; image URLs are checked
but not downloaded (the provider fetches them).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ..errors import AttachmentError, OutboundPolicyError
from ..messages import ContentPart, ImagePart, Message, TextPart, UserMessage
from ..models.contract import Capabilities
from ..models.media import require_vision
from ._outbound import check_url_shape, fetch, literal_ip, refusal, shown_url
from ._parse import (
    IMAGE_TYPES,
    Attachment,
    AttachmentPolicy,
    InlineSource,
    PathSource,
    UrlSource,
    media_type_of,
    sniffed_type,
)

__all__ = ["load_parts", "tool_parts", "with_parts"]

# What an image of a tool's result may be: the types every provider takes.
_TOOL_IMAGE_TYPES = frozenset(IMAGE_TYPES.values())


async def load_parts(
    attachments: Sequence[Attachment], policy: AttachmentPolicy, capabilities: Capabilities
) -> list[ContentPart]:
    """The content parts of `attachments`, in order. A model without vision is refused
    before anything is read or downloaded."""
    if any(a.kind == "image" for a in attachments):
        require_vision(capabilities)
    return [await _part(attachment, policy, capabilities) for attachment in attachments]


def with_parts(user_input: list[Message], parts: list[ContentPart]) -> list[Message]:
    """The input with `parts` put first in its last user message (or a new one)."""
    if not parts:
        return user_input
    for at in range(len(user_input) - 1, -1, -1):
        message = user_input[at]
        if isinstance(message, UserMessage):
            merged = UserMessage(content=[*parts, *message.content])
            return [*user_input[:at], merged, *user_input[at + 1 :]]
    return [*user_input, UserMessage(content=parts)]


async def tool_parts(
    parts: Sequence[ContentPart],
    policy: AttachmentPolicy | None,
    capabilities: Capabilities,
    tool: str,
) -> list[ContentPart]:
    """A tool result's parts, each image checked as an attachment is (a URL's shape and
    host, a local file read here once under the policy, the size cap) and its bytes
    checked to be the PNG, JPEG, GIF or WebP image it says: a bad one is an
    AttachmentError (OutboundPolicyError for a refusal), the call's error. For a model
    that cannot see, an image becomes a note. `policy` None: the default one (built only
    when there is an image: most results are text)."""
    if not any(isinstance(p, ImagePart) for p in parts):
        return list(parts)
    policy = policy or AttachmentPolicy()
    checked: list[ContentPart] = []
    for part in parts:
        if isinstance(part, ImagePart):
            if not capabilities.vision:
                part = TextPart(text="[an image: not shown, this model takes no images]")
            else:
                part = await _tool_image(part, policy, f"tool {tool!r}")
        checked.append(part)
    return checked


async def _tool_image(part: ImagePart, policy: AttachmentPolicy, origin: str) -> ImagePart:
    if part.url is not None:
        return _image_url(part.url, policy)
    if part.path is not None:
        data = await asyncio.to_thread(_read_local, PathSource(part.path, bare=False), policy)
        media_type = sniffed_type(data)
        if media_type is None:
            raise AttachmentError(
                f"{origin} returned {part.path!r}, not a PNG, JPEG, GIF or WebP image",
                attachment=origin,
            )
        return ImagePart(data=base64.b64encode(data).decode("ascii"), media_type=media_type)
    assert part.data is not None
    if len(part.data) * 3 // 4 > policy.max_file_bytes + 2:
        raise OutboundPolicyError(
            f"{origin} returned an image larger than the {policy.max_file_bytes}-byte cap",
            reason="too_large",
            attachment=origin,
        )
    if part.media_type not in _TOOL_IMAGE_TYPES:
        raise AttachmentError(
            f"{origin} returned an image of type {part.media_type!r}: only "
            f"{', '.join(sorted(_TOOL_IMAGE_TYPES))} are sent",
            attachment=origin,
        )
    try:
        head = base64.b64decode(part.data, validate=True)[:16]
    except (binascii.Error, ValueError):
        raise AttachmentError(
            f"{origin} returned image data that is not base64", attachment=origin
        ) from None
    if sniffed_type(head) != part.media_type:
        raise AttachmentError(
            f"{origin} returned image data that is not a {part.media_type} image",
            attachment=origin,
        )
    return part


async def _part(
    attachment: Attachment, policy: AttachmentPolicy, capabilities: Capabilities
) -> ContentPart:
    source = attachment.source
    if isinstance(source, InlineSource):
        if attachment.kind == "image":
            return ImagePart(data=source.data, media_type=source.media_type)
        return _document(attachment.name, base64.b64decode(source.data), attachment.name)
    if isinstance(source, UrlSource):
        if attachment.kind == "image" and not capabilities.image_urls:
            return await _remote_image(source.url, policy)
        if attachment.kind == "image":
            return _image_url(source.url, policy)
        return await _remote_document(attachment.name, source.url, policy)
    data = await asyncio.to_thread(_read_local, source, policy)
    if attachment.kind == "image":
        encoded = base64.b64encode(data).decode("ascii")
        return ImagePart(data=encoded, media_type=media_type_of(source.path, data))
    return _document(attachment.name, data, source.path)


def _image_url(url: str, policy: AttachmentPolicy) -> ImagePart:
    """An image URL goes to the provider as is, once its scheme and host pass; a host
    given as an address must be a public one (no DNS here: the provider resolves)."""
    _, host, _ = check_url_shape(url, policy.outbound)
    address = literal_ip(host)
    if address is not None:
        why = refusal(address, policy.outbound)
        if why is not None:
            raise OutboundPolicyError(
                f"image URL host {host!r} is a {why} address ({address}): refused",
                reason=why,
                url=shown_url(url),
            )
    return ImagePart(url=url)


async def _remote_image(url: str, policy: AttachmentPolicy) -> ImagePart:
    """An image by URL for a provider that fetches none (Bedrock): downloaded here by
    the guarded fetcher, under the outbound policy, and sent as its bytes."""
    if not policy.allow_remote_fetch:
        raise OutboundPolicyError(
            f"downloading {shown_url(url)} is refused: this model's provider takes no image"
            " URL and remote fetch is off (AttachmentPolicy(allow_remote_fetch=True) turns"
            " it on)",
            reason="remote_fetch_disabled",
            url=shown_url(url),
        )
    fetched = await fetch(url, policy.outbound)
    media_type = sniffed_type(fetched.body)
    if media_type is None:
        raise AttachmentError(f"{shown_url(url)} is not a PNG, JPEG, GIF or WebP image")
    return ImagePart(data=base64.b64encode(fetched.body).decode("ascii"), media_type=media_type)


async def _remote_document(name: str, url: str, policy: AttachmentPolicy) -> TextPart:
    if not policy.allow_remote_fetch:
        raise OutboundPolicyError(
            f"downloading {shown_url(url)} is refused: remote fetch is off "
            "(AttachmentPolicy(allow_remote_fetch=True) turns it on)",
            reason="remote_fetch_disabled",
            url=shown_url(url),
        )
    fetched = await fetch(url, policy.outbound)
    return _document(name, fetched.body, shown_url(url))


def _document(name: str, data: bytes, origin: str) -> TextPart:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachmentError(f"{origin} is not UTF-8 text", attachment=origin) from None
    label = name.replace('"', "'")
    # The closing newline keeps the user's own text apart when a wire joins text parts.
    return TextPart(text=f'<document name="{label}">\n{text}\n</document>\n')


def _roots(policy: AttachmentPolicy) -> list[Path]:
    roots = policy.allowed_roots if policy.allowed_roots is not None else (Path.cwd(),)
    resolved = []
    for root in roots:
        try:
            resolved.append(Path(root).resolve(strict=True))
        except (OSError, RuntimeError):
            continue  # a root that does not exist holds no file
    return resolved


def _read_local(source: PathSource, policy: AttachmentPolicy) -> bytes:
    """Check a local file against the policy and read it (in a worker thread)."""
    given = source.path
    if source.bare and not policy.allow_bare_local_paths:
        raise OutboundPolicyError(
            f"{given!r} names a local file, and plain paths are off here "
            '(use {"absolute_path": ...} or allow_bare_local_paths=True)',
            reason="bare_local_path",
            path=given,
        )
    roots = _roots(policy)
    try:
        # Judged where it leads first, so that a refusal says nothing of whether a
        # file outside the roots exists; then resolved strictly (it must exist).
        if not _inside(Path(given).resolve(), roots):
            raise OutboundPolicyError(
                f"{given!r} resolves outside the allowed roots", reason="outside_roots", path=given
            )
        resolved = Path(given).resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise AttachmentError(
            f"cannot read {given!r}: {type(exc).__name__}", attachment=given
        ) from None
    if not _inside(resolved, roots):  # changed between the two resolutions
        raise OutboundPolicyError(
            f"{given!r} resolves outside the allowed roots", reason="outside_roots", path=given
        )
    return _read_checked(resolved, given, policy.max_file_bytes)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _read_checked(resolved: Path, given: str, cap: int) -> bytes:
    # O_NOFOLLOW: the checked path is opened, not a symlink put in its place since.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        raise AttachmentError(
            f"cannot read {given!r}: {type(exc).__name__}", attachment=given
        ) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise AttachmentError(f"{given!r} is not a regular file", attachment=given)
        data = file.read(cap + 1)
    if len(data) > cap:
        raise OutboundPolicyError(
            f"{given!r} is larger than the {cap}-byte cap", reason="too_large", path=given
        )
    return data
