"""A minimal Cloud Storage JSON API, for Vertex AI batch prediction's input and output:
objects uploaded (``uploadType=media``, or ``multipart`` with its metadata part), got
(metadata, or ``alt=media`` content), listed by prefix, deleted."""

from __future__ import annotations

import base64
import hashlib
import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import BodyPartReader, web
from pydantic_core import from_json

from ._batch_common import Core
from ._gemini_calls import Calls, error_reply, json_reply, stamp, utcnow


@dataclass(slots=True)
class StoredObject:
    bucket: str
    name: str
    content: bytes
    content_type: str
    generation: int
    created: datetime

    def obj(self, origin: str) -> dict[str, Any]:
        path = f"b/{self.bucket}/o/{quote(self.name, safe='')}"
        return {
            "kind": "storage#object",
            "id": f"{self.bucket}/{self.name}/{self.generation}",
            "selfLink": f"{origin}/storage/v1/{path}",
            "mediaLink": (
                f"{origin}/download/storage/v1/{path}?generation={self.generation}&alt=media"
            ),
            "name": self.name,
            "bucket": self.bucket,
            "generation": str(self.generation),
            "contentType": self.content_type,
            "size": str(len(self.content)),
            "md5Hash": base64.b64encode(hashlib.md5(self.content).digest()).decode(),
            "timeCreated": stamp(self.created),
            "updated": stamp(self.created),
        }


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/name`` as (bucket, name); ValueError if it is not one."""
    if not uri.startswith("gs://") or "/" not in uri[5:]:
        raise ValueError(f"not a Cloud Storage URI: {uri!r}")
    bucket, _, name = uri[5:].partition("/")
    return bucket, name


class GcsObjects:
    """Buckets exist as soon as an object is written to them."""

    def __init__(self, core: Core) -> None:
        self.calls = Calls(core, "gcs", batch_call=True, bearer=True)
        self.objects: dict[tuple[str, str], StoredObject] = {}
        self._generations = itertools.count(1_700_000_000_000_000)

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        app.router.add_post("/upload/storage/v1/b/{bucket}/o", h(self._upload))
        app.router.add_get("/storage/v1/b/{bucket}/o", h(self._list))
        app.router.add_get("/storage/v1/b/{bucket}/o/{name:.+}", h(self._get))
        app.router.add_get("/download/storage/v1/b/{bucket}/o/{name:.+}", h(self._get))
        app.router.add_delete("/storage/v1/b/{bucket}/o/{name:.+}", h(self._delete))

    def put(self, bucket: str, name: str, content: bytes, content_type: str) -> StoredObject:
        stored = StoredObject(
            bucket, name, content, content_type, next(self._generations), utcnow()
        )
        self.objects[(bucket, name)] = stored
        return stored

    def read(self, uri: str) -> bytes | None:
        """The content at a ``gs://`` URI (None: no such object)."""
        found = self.objects.get(split_uri(uri))
        return None if found is None else found.content

    def clear(self) -> None:
        self.objects.clear()

    async def _upload(self, request: web.Request, rid: str) -> web.Response:
        bucket = request.match_info["bucket"]
        kind = request.query.get("uploadType")
        name = request.query.get("name")
        content_type = request.content_type or "application/octet-stream"
        if kind == "media":
            content = await request.read()
        elif kind == "multipart":
            reader = await request.multipart()
            meta_part = await reader.next()
            data_part = await reader.next()
            if not isinstance(meta_part, BodyPartReader) or not isinstance(
                data_part, BodyPartReader
            ):
                return error_reply(400, "A multipart upload has a metadata part and a media part.")
            meta = from_json(await meta_part.read())
            name = name or (meta.get("name") if isinstance(meta, dict) else None)
            content = bytes(await data_part.read())
            content_type = data_part.headers.get("Content-Type", "application/octet-stream")
        else:
            return error_reply(400, f"Unsupported uploadType: {kind!r} (media or multipart).")
        if not name:
            return error_reply(400, "Required object name.")
        stored = self.put(bucket, str(name), content, content_type)
        return json_reply(stored.obj(_origin(request)))

    def _found(self, request: web.Request) -> StoredObject | None:
        return self.objects.get((request.match_info["bucket"], unquote(request.match_info["name"])))

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        found = self._found(request)
        if found is None:
            return error_reply(
                404,
                f"No such object: {request.match_info['bucket']}/"
                f"{unquote(request.match_info['name'])}",
            )
        if request.query.get("alt") == "media":
            return web.Response(body=found.content, content_type=found.content_type)
        return json_reply(found.obj(_origin(request)))

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        found = self._found(request)
        if found is None:
            return error_reply(404, "No such object.")
        del self.objects[(found.bucket, found.name)]
        return web.Response(status=204)

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        bucket, prefix = request.match_info["bucket"], request.query.get("prefix", "")
        items = [
            o.obj(_origin(request))
            for (b, name), o in sorted(self.objects.items())
            if b == bucket and name.startswith(prefix)
        ]
        out: dict[str, Any] = {"kind": "storage#objects"}
        if items:
            out["items"] = items
        return json_reply(out)


def _origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
