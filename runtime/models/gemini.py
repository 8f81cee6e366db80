"""Gemini, on the Gemini API (an API key) and on Vertex AI (Google credentials).

The wire is `_gemini_wire` (bodies, contents, schemas), `_gemini_reply` (replies and
streams), `_gemini_errors` (Google's error bodies, `RetryInfo`) and `_gemini_prices`;
this module states it on the skeleton (`HTTPModel`), and signs Vertex AI's requests
with a token from google-auth, refreshed off the event loop when it expires.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import pydantic_core
from typing_extensions import Unpack

from ..errors import (
    AuthenticationError,
    InvalidOptionsError,
    ProviderError,
    RateLimitError,
    ServerError,
)
from ..messages import Message
from ..redaction import register_secret
from ..usage import Usage
from . import _gemini_errors as errors
from . import _gemini_prices as prices
from . import _gemini_wire as wire
from ._errors import retry_after_seconds
from ._http import HTTPModel, ModelSettings
from ._transport import Outgoing
from ._wire import ErrorEvent, Event, Reply, json_object
from .contract import Capabilities, ModelOptions, StreamChunk, Tier

if TYPE_CHECKING:
    from ._batch_wire import BatchAPI

__all__ = ["GeminiModel", "GeminiSettings"]

GeminiTier = Literal["flex", "standard", "priority"]
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_API_URL = "https://generativelanguage.googleapis.com"
_STORAGE_URL = "https://storage.googleapis.com"
_THINKING = re.compile(r"(^|/)gemini-(2\.5|[3-9])")
# Vertex AI's way to ask for a tier (the body's `serviceTier` is the Gemini API's).
_VERTEX_TIER_HEADER = "X-Vertex-AI-LLM-Shared-Request-Type"


class GeminiSettings(ModelSettings, total=False):
    """`ModelSettings`, and Gemini's own: `vertex` (Vertex AI instead of the Gemini
    API), its `project` and `location` ("global" or a region), `credentials` (a
    google-auth `Credentials`; default: google-auth's default chain, as Google's own
    libraries find them), `api_version` ("v1beta" on the Gemini API, "v1" on Vertex
    AI), `service_tier` ("flex", "standard", "priority", or a `raygent.Tier` with a
    fallback), `cached_content` (an explicit cache, `cachedContents/...`, every
    request reads), and for Vertex AI's batch prediction `batch_bucket` (a
    `gs://bucket/prefix` its lines and results go in) and `storage_url` (Cloud
    Storage's JSON API, default `https://storage.googleapis.com`)."""

    vertex: bool
    project: str | None
    location: str | None
    credentials: Any
    api_version: str | None
    service_tier: GeminiTier | Tier | None
    cached_content: str | None
    batch_bucket: str | None
    storage_url: str | None


class GeminiModel(HTTPModel):
    """A Gemini model over its native wire (`generateContent`, `streamGenerateContent`).

    The Gemini API: the key from `api_key`, `GEMINI_API_KEY` or `GOOGLE_API_KEY`, sent
    as `x-goog-api-key`. Vertex AI (`vertex=True`): `project` (or
    `GOOGLE_CLOUD_PROJECT`, or the default credentials' project) and `location` (or
    `GOOGLE_CLOUD_LOCATION`; default "global"), signed with an OAuth token from
    `credentials` or google-auth's default chain (`GOOGLE_APPLICATION_CREDENTIALS`,
    gcloud's application-default login, the metadata server); or, in Vertex AI's express
    mode, `api_key=` and no project, location or credentials. `base_url` is what
    google-genai's `HttpOptions` takes (the host: the version is `api_version`'s); else
    `GOOGLE_GEMINI_BASE_URL` or, for Vertex AI, `GOOGLE_VERTEX_BASE_URL`, as it reads.
    """

    provider = "gemini"
    env_key = "GEMINI_API_KEY"
    env_base_url = "GOOGLE_GEMINI_BASE_URL"
    default_base_url = _API_URL
    prices_as = "google"
    settings_type = GeminiSettings

    def __init__(
        self,
        name: str,
        *,
        default_max_tokens: int | None = None,
        **settings: Unpack[GeminiSettings],
    ) -> None:
        vertex = bool(settings.get("vertex", False))
        # Vertex AI in express mode: an API key, no project; served from the global host.
        express = vertex and bool(settings.get("api_key"))
        if express:
            given_too = [s for s in ("project", "location", "credentials") if settings.get(s)]
            if given_too:
                raise InvalidOptionsError(
                    "GeminiModel(vertex=True): api_key= (Vertex AI express mode) and"
                    f" {', '.join(s + '=' for s in given_too)} exclude each other:"
                    " pass an API key, or a project with Google credentials"
                )
        location = (
            "global"
            if express
            else settings.get("location") or os.environ.get("GOOGLE_CLOUD_LOCATION") or "global"
        )
        if vertex and not settings.get("base_url"):
            host = "aiplatform" if location == "global" else f"{location}-aiplatform"
            # As google-genai: Vertex AI's own variable, else the location's host.
            given = os.environ.get("GOOGLE_VERTEX_BASE_URL") or f"https://{host}.googleapis.com"
            settings = {**settings, "base_url": given}
        super().__init__(name.removeprefix("models/"), **cast("ModelSettings", settings))
        self.vertex = vertex
        self.express = express
        self.location = location
        self.default_max_tokens = default_max_tokens
        self.service_tier = settings.get("service_tier")
        self.cached_content = settings.get("cached_content")
        self.batch_bucket = settings.get("batch_bucket")
        self.storage_url = settings.get("storage_url") or _STORAGE_URL
        self.api_version = settings.get("api_version") or ("v1" if vertex else "v1beta")
        self._credentials = settings.get("credentials")
        self._own_credentials = self._credentials is None  # found by the default chain
        self._refresh_lock = threading.Lock()
        self.project: str | None
        if express:
            self.project = None
            self._prefix = f"/{self.api_version}/publishers/google/models"
        elif vertex:
            self._key_required = False
            self.project = settings.get("project") or _env_project() or self._default_project()
            self._prefix = (
                f"/{self.api_version}/projects/{self.project}/locations/{location}"
                "/publishers/google/models"
            )
        else:
            self.project = settings.get("project")
            if not self._api_key and "api_key" not in settings:
                self._api_key = os.environ.get("GOOGLE_API_KEY", "")
                self.__dict__.pop("_secrets", None)
                self._register_secrets()
            self._prefix = f"/{self.api_version}/models"

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        # Every Gemini model reads images and caches prompts implicitly; 2.5 and later think.
        return Capabilities(
            reasoning=bool(_THINKING.search(name)), prompt_caching=True, vision=True
        )

    # -- identity ---------------------------------------------------------------------

    @functools.cached_property
    def key_fingerprint(self) -> str:
        """Vertex AI holds its limits per project (and region): the project, hashed."""
        if not self.vertex or self.express:
            return super().key_fingerprint  # express mode's limits are the key's
        return hashlib.sha256(f"vertex:{self.project}:{self.location}".encode()).hexdigest()[:12]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_refresh_lock"] = None
        if self._own_credentials:
            state["_credentials"] = None  # found again by the default chain where it lands
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._refresh_lock = threading.Lock()

    # -- the wire ---------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if (self.vertex and not self.express) or not self._api_key:
            return {}
        return {"x-goog-api-key": self._api_key}

    def request_path(self, *, stream: bool) -> str:
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self._prefix}/{self.name}:{verb}"

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        return wire.request_body(
            self.name,
            messages,
            options,
            self.capabilities,
            cached_content=self.cached_content,
            default_max_tokens=self.default_max_tokens,
        )

    def body_headers(self, body: dict[str, Any]) -> Mapping[str, str] | None:
        tier = body.get("serviceTier")
        if self.vertex and tier is not None:
            return {_VERTEX_TIER_HEADER: str(tier)}
        return None

    def batch_body(self, messages: Any, options: ModelOptions | None) -> dict[str, Any]:
        body = self.request_body(messages, options, stream=False)
        body.pop("serviceTier", None)  # a batch is served at the batch tier
        return body

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        if "error" in data and "candidates" not in data:
            raise ErrorEvent(data, None)  # an error in a 200 (a batch line's, a proxy's)
        return _reply(wire.read_reply(data))

    def stream_feeder(self) -> GeminiStream:
        return GeminiStream()

    def header_tier(self, headers: Mapping[str, str]) -> str | None:
        """The Gemini API names the tier that served a reply in a header (priority past
        its limit silently reads "standard"); Vertex AI in the reply's usage."""
        value = headers.get("x-gemini-service-tier")
        return wire.served_tier({}, value) if value else None

    def batch_api(self) -> BatchAPI | None:
        """The Gemini API's batch mode (inline or through the Files API), or Vertex AI
        batch prediction over Cloud Storage (None without a `batch_bucket`: nowhere to
        put its lines; express mode has no batch prediction)."""
        from .gemini_batch import GeminiBatchAPI, VertexBatchAPI

        if not self.vertex:
            return GeminiBatchAPI(self)
        if not self.batch_bucket or self.express:
            return None
        return VertexBatchAPI(self, self.batch_bucket, self.storage_url)

    def _priced(self, usage: Usage, *, batch: bool = False, tier: str | None = None) -> Usage:
        # By prompt length where Gemini prices so; priority (unlisted) at its multiplier.
        return prices.priced(usage, self.name, batch=batch, tier=tier, declared=self.pricing)

    # -- Google's errors --------------------------------------------------------------

    def typed_error(
        self,
        status: int | None,
        headers: Mapping[str, str],
        body: Any,
        sent: dict[str, Any] | None,
    ) -> ProviderError:
        """Google's errors typed by its rules (`_gemini_errors`): a flex request shed
        with 503 is a refusal for capacity, `RetryInfo` the wait, a `Retry-After` header
        (a proxy's) the wait where the body gave none."""
        error = errors.error_from_body(
            body,
            status=status,
            secrets=self._secrets,
            flex=sent is not None and sent.get("serviceTier") == "flex",
            request_id=headers.get("x-goog-request-id"),
        )
        return _waited(error, headers)

    # -- Vertex AI's credentials -------------------------------------------------------

    async def sign(self, request: Outgoing) -> None:
        if not self.vertex or "x-goog-api-key" in request.headers:
            return
        credentials: Any = self._credentials
        if credentials is None or not credentials.valid:
            # google-auth refreshes over blocking HTTP: off the event loop.
            credentials = await asyncio.to_thread(self._refreshed)
            if credentials.token:  # kept out of every error, as the API key is
                register_secret(credentials.token, self)
        request.headers["authorization"] = f"Bearer {credentials.token}"
        # The project, when the credentials bill another (a user's ADC login).
        quota = getattr(credentials, "quota_project_id", None)
        if quota:
            request.headers["x-goog-user-project"] = quota

    def _refreshed(self) -> Any:
        """The credentials, found and refreshed as needed (in a thread; one at a time)."""
        with self._refresh_lock:
            try:
                import google.auth
                import google.auth.transport.requests
                from google.auth.exceptions import GoogleAuthError
            except ImportError as exc:  # pragma: no cover - google-auth is a dependency
                raise InvalidOptionsError(
                    "Vertex AI needs google-auth: pip install google-auth"
                ) from exc
            try:
                if self._credentials is None:
                    self._credentials, _ = google.auth.default(scopes=list(SCOPES))
                if not self._credentials.valid:
                    self._credentials.refresh(google.auth.transport.requests.Request())
            except GoogleAuthError as exc:
                raise AuthenticationError(
                    f"gemini: no usable Google credentials for Vertex AI: {exc}",
                    provider=self.provider,
                    status=None,
                    provider_code="credentials",
                ) from None
            return self._credentials

    def _default_project(self) -> str:
        """The project google-auth's default chain names (InvalidOptionsError: none)."""
        try:
            import google.auth
            from google.auth.exceptions import GoogleAuthError

            credentials, project = google.auth.default(scopes=list(SCOPES))
        except (ImportError, GoogleAuthError):
            project = None
        else:
            if self._credentials is None:
                self._credentials = credentials
        if not project:
            raise InvalidOptionsError(
                "GeminiModel(vertex=True) needs a Google Cloud project: pass project= or"
                " set GOOGLE_CLOUD_PROJECT"
            )
        return str(project)


def _waited(error: ProviderError, headers: Mapping[str, str]) -> ProviderError:
    """`error` with a `Retry-After` header's wait where Google's body gave none (Google
    sends none, a proxy in front of it may)."""
    if isinstance(error, RateLimitError | ServerError) and error.details.get("retry_after") is None:
        wait = retry_after_seconds(headers)
        if wait is not None:
            error.details["retry_after"] = wait
    return error


def _env_project() -> str | None:
    return os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCLOUD_PROJECT")


def _reply(read: wire.Reply) -> Reply:
    return Reply(
        content=read.content,
        tool_calls=read.tool_calls,
        finish_reason=read.finish_reason,
        usage=read.usage,
        response_id=read.response_id,
        model=read.model,
        service_tier=read.service_tier,
    )


class GeminiStream:
    """A `streamGenerateContent` stream on the skeleton: each SSE event's JSON into
    `_gemini_wire.StreamState`; an error event raised as `ErrorEvent`; the tier that
    served it from the header (the skeleton sets it) or the reply's usage (Vertex)."""

    def __init__(self) -> None:
        self._state = wire.StreamState()
        self.ended = False
        self.service_tier: str | None = None

    def feed(self, event: Event) -> list[StreamChunk]:
        data: Any = pydantic_core.from_json(event.data)
        if isinstance(data, list) and data and isinstance(data[0], dict) and "error" in data[0]:
            raise ErrorEvent(data[0], None)
        data = json_object(event.data) if not isinstance(data, dict) else data
        if "error" in data:
            raise ErrorEvent(data, None)
        served = wire.served_tier(data)
        if served is not None:
            self.service_tier = served
        out = self._state.feed(data)
        self.ended = self._state.done
        return out

    def reply(self) -> Reply | None:
        if not self._state.done:
            return None
        read = _reply(self._state.reply())
        read.service_tier = self.service_tier or read.service_tier
        return read
