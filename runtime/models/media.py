"""Images for the wire: a local path becomes base64 data at request time."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

from ..errors import InvalidRequestError
from ..messages import ImagePart
from .contract import Capabilities


def require_vision(capabilities: Capabilities) -> None:
    """Refuse images before any request when the model cannot see."""
    if not capabilities.vision:
        raise InvalidRequestError("this model has no vision capability: it cannot take images")


def image_data(part: ImagePart) -> tuple[str, str] | None:
    """(media_type, base64 data) for inline or local images; None for URL images."""
    if part.data is not None:
        return part.media_type or "application/octet-stream", part.data
    if part.path is not None:
        path = Path(part.path)
        media_type = part.media_type or mimetypes.guess_type(path.name)[0] or "image/png"
        return media_type, base64.b64encode(path.read_bytes()).decode("ascii")
    return None


def image_url(part: ImagePart) -> str:
    """A URL for the image: its own, or a data: URL."""
    inline = image_data(part)
    if inline is None:
        assert part.url is not None
        return part.url
    media_type, data = inline
    return f"data:{media_type};base64,{data}"
