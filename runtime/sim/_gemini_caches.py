"""Explicit context caching: ``cachedContents`` created, read, listed, given a new TTL
and deleted (Gemini API and Vertex AI), and read by requests naming them in
``cachedContent`` (their tokens reported as ``cachedContentTokenCount``)."""

from __future__ import annotations

import re
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
from ._gemini_request import CACHE_MIN_TOKENS, CachedPrompt, cached_prompt, get, model_id
from ._types import WireError

_DEFAULT_TTL = timedelta(hours=1)
_TTL = re.compile(r"^(\d+(?:\.\d+)?)s$")
_NOT_FOUND = "CachedContent not found (or permission denied)"


@dataclass(slots=True)
class _Entry:
    prompt: CachedPrompt
    model: str  # as the create body named it
    display_name: str | None
    created: datetime
    updated: datetime
    expires: datetime

    def obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.prompt.name,
            "model": self.model,
            "createTime": stamp(self.created),
            "updateTime": stamp(self.updated),
            "expireTime": stamp(self.expires),
            "usageMetadata": {"totalTokenCount": self.prompt.tokens},
        }
        if self.display_name is not None:
            out["displayName"] = self.display_name
        return out


def _expiry(body: dict[str, Any], now: datetime) -> datetime | None:
    """The expiry a body sets (``ttl`` like ``"300s"``, or ``expireTime``); None when
    it sets neither; ValueError when it is malformed."""
    ttl, expire = get(body, "ttl"), get(body, "expireTime")
    if ttl is not None:
        match = _TTL.match(str(ttl))
        if match is None:
            raise ValueError(
                f"Invalid value at 'cached_content.ttl' (google.protobuf.Duration), {ttl!r}"
            )
        return now + timedelta(seconds=float(match.group(1)))
    if expire is not None:
        return datetime.fromisoformat(str(expire).replace("Z", "+00:00"))
    return None


class GeminiCaches:
    """``/v1beta/cachedContents`` and Vertex AI's ``.../locations/{l}/cachedContents``."""

    def __init__(self, core: Core) -> None:
        self.calls = Calls(core, "gemini_caches", batch_call=False)
        self.entries: dict[str, _Entry] = {}

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        prefixes = [f"/{v}" for v in VERSIONS]
        for prefix in (*prefixes, "/{version}/projects/{project}/locations/{location}"):
            app.router.add_post(prefix + "/cachedContents", h(self._create))
            app.router.add_get(prefix + "/cachedContents", h(self._list))
            app.router.add_get(prefix + "/cachedContents/{id}", h(self._get))
            app.router.add_patch(prefix + "/cachedContents/{id}", h(self._patch))
            app.router.add_delete(prefix + "/cachedContents/{id}", h(self._delete))

    def lookup(self, name: str) -> CachedPrompt | None:
        """The prompt of a live cache named `name` (None: unknown or expired)."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        if entry.expires <= utcnow():
            del self.entries[name]
            return None
        return entry.prompt

    def clear(self) -> None:
        self.entries.clear()

    def _name(self, request: web.Request, cache_id: str) -> str:
        if "project" in request.match_info:
            info = request.match_info
            return (
                f"projects/{info['project']}/locations/{info['location']}/cachedContents/{cache_id}"
            )
        return f"cachedContents/{cache_id}"

    def _entry(self, request: web.Request) -> _Entry | None:
        name = self._name(request, request.match_info["id"])
        return self.entries[name] if self.lookup(name) is not None else None

    async def _create(self, request: web.Request, rid: str) -> web.Response:
        body = await read_json(request)
        if not isinstance(body, dict):
            return error_reply(400, "Invalid JSON payload received.")
        model = get(body, "model")
        if not isinstance(model, str) or not model:
            return error_reply(
                400, "* CreateCachedContentRequest.cached_content.model: model is required"
            )
        now = utcnow()
        name = self._name(request, self.calls.new_id())
        try:
            expires = _expiry(body, now) or now + _DEFAULT_TTL
            prompt = cached_prompt(name, model_id(model), body)
        except ValueError as exc:
            return error_reply(400, str(exc))
        except WireError as exc:
            return error_reply(exc.status, exc.message)
        if prompt.tokens < CACHE_MIN_TOKENS:
            message = (
                f"Cached content is too small. total_token_count={prompt.tokens}, "
                f"min_total_token_count={CACHE_MIN_TOKENS}"
            )
            return error_reply(400, message)
        display = get(body, "displayName")
        entry = _Entry(
            prompt, model, display if isinstance(display, str) else None, now, now, expires
        )
        self.entries[name] = entry
        return json_reply(entry.obj())

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        entry = self._entry(request)
        return error_reply(403, _NOT_FOUND) if entry is None else json_reply(entry.obj())

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        size = page_size(request, 100, 1000)
        if size is None:
            return error_reply(400, "Invalid value at 'page_size' (TYPE_INT32)")
        prefix = self._name(request, "")
        live = [n for n in list(self.entries) if n.startswith(prefix) and self.lookup(n)]
        items = [self.entries[n].obj() for n in live]
        return json_reply(paged(items, request, "cachedContents", size) if items else {})

    async def _patch(self, request: web.Request, rid: str) -> web.Response:
        entry = self._entry(request)
        if entry is None:
            return error_reply(403, _NOT_FOUND)
        body = await read_json(request)
        if not isinstance(body, dict):
            return error_reply(400, "Invalid JSON payload received.")
        now = utcnow()
        try:
            expires = _expiry(body, now)
        except ValueError as exc:
            return error_reply(400, str(exc))
        if expires is None:
            return error_reply(400, "Only ttl or expire_time may be updated on a CachedContent.")
        entry.expires, entry.updated = expires, now
        return json_reply(entry.obj())

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        entry = self._entry(request)
        if entry is None:
            return error_reply(403, _NOT_FOUND)
        del self.entries[entry.prompt.name]
        return json_reply({})
