"""Google's OAuth 2.0 token endpoint (``POST /token``), for google-auth's default chain
pointed at the simulator (an ``authorized_user`` or service-account file whose
``token_uri`` is the simulator's): a refresh-token or JWT-bearer grant gets an access
token, as ``https://oauth2.googleapis.com/token`` answers one; Vertex AI then takes it
as its Bearer token."""

from __future__ import annotations

import itertools
from urllib.parse import parse_qs

from aiohttp import web

_GRANTS = ("refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer")
_LIFETIME = 3599  # seconds, as Google grants


class GoogleOAuth:
    """Access tokens issued, in order (`issued`), for a test to see the chain was used."""

    def __init__(self) -> None:
        self.issued: list[str] = []
        self._serial = itertools.count(1)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/token", self._token)

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: v[0] for k, v in parse_qs(await request.text()).items()}
        grant = form.get("grant_type")
        if grant not in _GRANTS:
            return _refused("unsupported_grant_type", f"Invalid grant_type: {grant}")
        if grant == "refresh_token" and not form.get("refresh_token"):
            return _refused("invalid_request", "Missing required parameter: refresh_token")
        if grant != "refresh_token" and not form.get("assertion"):
            return _refused("invalid_request", "Missing required parameter: assertion")
        token = f"ya29.sim-{next(self._serial):06d}"
        self.issued.append(token)
        body = {"access_token": token, "expires_in": _LIFETIME, "token_type": "Bearer"}
        if form.get("scope"):
            body["scope"] = form["scope"]
        return web.json_response(body)


def _refused(error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=400)
