"""The official google-genai SDK pointed at the simulator, and strict readings of the
simulator's raw replies with the SDK's types (which forbid unknown fields)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials

from raygent.sim import Simulator

KEY = "gemini-test-key"
NO_RETRY = types.HttpRetryOptions(attempts=1)
# A genai.Client closes its connections when collected: a client made inline and
# dropped mid-call would close under its own request. Kept here, closed by `close_all`.
_OPEN: list[genai.Client] = []


def close_all() -> None:
    """Close every client made since the last call (a fixture's teardown)."""
    while _OPEN:
        _OPEN.pop().close()


def _kept(client: genai.Client) -> genai.Client:
    _OPEN.append(client)
    return client


def gemini(sim: Simulator, *, api_version: str = "v1beta", key: str = KEY) -> genai.Client:
    """A Gemini API client (API key) on the simulator."""
    options = types.HttpOptions(base_url=sim.url, api_version=api_version, retry_options=NO_RETRY)
    return _kept(genai.Client(api_key=key, http_options=options))


def vertex(sim: Simulator, *, location: str = "global", token: str = KEY) -> genai.Client:
    """A Vertex AI client on the simulator, with fake OAuth credentials (a token)."""
    options = types.HttpOptions(base_url=sim.url, retry_options=NO_RETRY)
    return _kept(
        genai.Client(
            vertexai=True,
            project="sim-project",
            location=location,
            credentials=Credentials(token=token),
            http_options=options,
        )
    )


def express(sim: Simulator, *, key: str = KEY) -> genai.Client:
    """A Vertex AI client in express mode (an API key, no project) on the simulator."""
    options = types.HttpOptions(base_url=sim.url, retry_options=NO_RETRY)
    return _kept(genai.Client(vertexai=True, api_key=key, http_options=options))


def strict(raw: dict[str, Any], *, vertex: bool = False) -> types.GenerateContentResponse:
    """A raw reply read by the SDK's type with no field it does not know (the one
    documented rename: the Gemini API's `citationSources` is the SDK's `citations`)."""
    raw = copy.deepcopy(raw)
    for candidate in raw.get("candidates") or ():
        metadata = candidate.get("citationMetadata")
        if not vertex and metadata is not None:
            metadata["citations"] = metadata.pop("citationSources")
    return types.GenerateContentResponse.model_validate(raw)


def post(
    sim: Simulator, path: str, body: Any, *, key: str | None = KEY, **kwargs: Any
) -> httpx.Response:
    """A raw POST with the key in `x-goog-api-key`."""
    headers = {"x-goog-api-key": key} if key is not None else {}
    return httpx.post(sim.url + path, json=body, headers=headers, timeout=10, **kwargs)


def text_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON of each `data:` event of an SSE body (events end with CRLF CRLF)."""
    import json

    blocks = response.text.replace("\r\n", "\n").split("\n\n")
    return [json.loads(b[len("data: ") :]) for b in blocks if b.startswith("data: ")]
