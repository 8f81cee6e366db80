"""The Gemini Files API: resumable uploads (``X-Goog-Upload-*`` headers: start, then
chunks at the upload URL, the last one finalising), ``files/{id}`` get, list and
delete, and the download of generated files (a batch's responses) by
``:download?alt=media``."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from ._batch_common import Core
from ._gemini_calls import (
    VERSIONS,
    Calls,
    error_reply,
    json_reply,
    page_size,
    paged,
    read_json,
    stamp,
    utcnow,
)
from ._gemini_request import get

MAX_FILE_BYTES = 2 * 1024**3
_TTL = timedelta(hours=48)


@dataclass(slots=True)
class StoredFile:
    name: str
    display_name: str | None
    mime_type: str
    content: bytes
    created: datetime
    source: str  # UPLOADED, GENERATED
    origin: str

    def obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "mimeType": self.mime_type,
            "sizeBytes": str(len(self.content)),
            "createTime": stamp(self.created),
            "updateTime": stamp(self.created),
            "expirationTime": stamp(self.created + _TTL),
            "sha256Hash": base64.b64encode(hashlib.sha256(self.content).digest()).decode(),
            "uri": f"{self.origin}/v1beta/{self.name}",
            "state": "ACTIVE",
            "source": self.source,
        }
        if self.display_name is not None:
            out["displayName"] = self.display_name
        if self.source == "GENERATED":
            out["downloadUri"] = f"{self.origin}/download/v1beta/{self.name}:download?alt=media"
        return out


@dataclass(slots=True)
class _Upload:
    file: StoredFile
    size: int
    received: bytearray


class GeminiFiles:
    """Files uploaded for batches (and as ``fileData``), and the files batches write."""

    def __init__(self, core: Core) -> None:
        self.calls = Calls(core, "gemini_batch", batch_call=True)
        self.files: dict[str, StoredFile] = {}
        self._uploads: dict[str, _Upload] = {}

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        for version in VERSIONS:
            app.router.add_post(f"/upload/{version}/files", h(self._upload))
            app.router.add_get(f"/download/{version}/files/{{id}}", h(self._get))
        app.router.add_get("/v1beta/files", h(self._list))
        app.router.add_get("/v1beta/files/{id}", h(self._get))
        app.router.add_delete("/v1beta/files/{id}", h(self._delete))

    def clear(self) -> None:
        self.files.clear()
        self._uploads.clear()

    def generated(self, name: str, content: bytes, origin: str) -> StoredFile:
        """A file written by the service (a batch's responses)."""
        file = StoredFile(name, None, "application/jsonl", content, utcnow(), "GENERATED", origin)
        self.files[name] = file
        return file

    async def _upload(self, request: web.Request, rid: str) -> web.Response:
        upload_id = request.query.get("upload_id")
        if upload_id is not None:
            return await self._chunk(request, upload_id)
        if request.headers.get("X-Goog-Upload-Protocol") != "resumable":
            return error_reply(400, "Only the resumable upload protocol is supported here.")
        if request.headers.get("X-Goog-Upload-Command") != "start":
            return error_reply(400, "A resumable upload starts with X-Goog-Upload-Command: start.")
        body = await read_json(request)
        meta = get(body, "file") if isinstance(body, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        try:
            size = int(request.headers.get("X-Goog-Upload-Header-Content-Length", "-1"))
        except ValueError:
            size = -1
        if size < 0:
            return error_reply(400, "X-Goog-Upload-Header-Content-Length is required.")
        if size > MAX_FILE_BYTES:
            return error_reply(
                400, f"File size {size} exceeds the limit of {MAX_FILE_BYTES} bytes."
            )
        name = get(meta, "name") or f"files/{self.calls.new_id()}"
        if not str(name).startswith("files/"):
            name = f"files/{name}"
        if name in self.files:
            return error_reply(409, f"Cannot create file {name}: it already exists.")
        mime = (
            get(meta, "mimeType")
            or request.headers.get("X-Goog-Upload-Header-Content-Type")
            or "application/octet-stream"
        )
        display = get(meta, "displayName")
        origin = f"{request.scheme}://{request.host}"
        file = StoredFile(str(name), display, str(mime), b"", utcnow(), "UPLOADED", origin)
        token = self.calls.new_id()
        self._uploads[token] = _Upload(file, size, bytearray())
        url = f"{origin}{request.path}?upload_id={token}&upload_protocol=resumable"
        headers = {"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"}
        return web.Response(status=200, headers=headers)

    async def _chunk(self, request: web.Request, upload_id: str) -> web.Response:
        upload = self._uploads.get(upload_id)
        if upload is None:
            return error_reply(404, "No such upload session.")
        command = {c.strip() for c in request.headers.get("X-Goog-Upload-Command", "").split(",")}
        offset = request.headers.get("X-Goog-Upload-Offset")
        if "upload" not in command or offset != str(len(upload.received)):
            headers = {"X-Goog-Upload-Status": "active"}
            message = f"Bad upload chunk: expected offset {len(upload.received)}, got {offset}."
            return web.Response(status=400, headers=headers, text=message)
        upload.received.extend(await request.read())
        if "finalize" not in command:
            return web.Response(status=200, headers={"X-Goog-Upload-Status": "active"})
        del self._uploads[upload_id]
        if len(upload.received) != upload.size:
            message = f"Upload finalised with {len(upload.received)} of {upload.size} bytes."
            return error_reply(400, message)
        upload.file.content = bytes(upload.received)
        self.files[upload.file.name] = upload.file
        return json_reply({"file": upload.file.obj()}, headers={"X-Goog-Upload-Status": "final"})

    def _file(self, request: web.Request) -> tuple[StoredFile | None, bool]:
        """The file a path names, and whether the path asks for its content."""
        raw = request.match_info["id"]
        download = raw.endswith(":download")
        return self.files.get("files/" + raw.removesuffix(":download")), download

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        file, download = self._file(request)
        if file is None:
            return error_reply(
                403, "You do not have permission to access the File or it may not exist."
            )
        if not download:
            return json_reply(file.obj())
        if request.query.get("alt") != "media":
            return error_reply(400, "A download needs alt=media.")
        if file.source != "GENERATED":
            return error_reply(400, "Only generated files can be downloaded.")
        return web.Response(body=file.content, content_type="application/octet-stream")

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        file, _ = self._file(request)
        if file is None:
            return error_reply(
                403, "You do not have permission to access the File or it may not exist."
            )
        del self.files[file.name]
        return json_reply({})

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        size = page_size(request, 10, 100)
        if size is None:
            return error_reply(400, "Invalid value at 'page_size' (TYPE_INT32)")
        items = [f.obj() for f in reversed(self.files.values())]
        return json_reply(paged(items, request, "files", size) if items else {})
