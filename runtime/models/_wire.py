"""The wire interface: what an adapter states, so that the skeleton does the rest.

Every wire does the same per request: fill the call's options from the model's settings,
build the body, post it (or stream it), map an error reply to a typed error, read the
rate-limit headers, parse the reply and its usage, price it (genai-prices or declared
rates, at the tier that served it or at batch rates), and assemble a streamed reply into
its `Done`. `HTTPModel` (`_http.py`) writes those steps once: `complete`, `stream`,
`request_body`, `batch_reply`, `line_error`. An adapter is a subclass that states only
its wire, in the hooks `Wire` declares (below; the pure wire mapping lives in a
`_<name>_wire.py` beside the adapter, and is tested without I/O):

Required:

- `provider`, `env_key`, `default_base_url`: who it is, where its key and host are
  (no `env_key`: the wire takes no API key, its requests are signed). `key_fingerprint`
  names the account an endpoint's limits are held for: a hash of the key, unless the
  wire's credentials are another thing (an AWS access key id, a Google project).
- `build_body(messages, options, *, stream) -> dict`: the JSON body, from options the
  model's settings filled.
- `request_path(*, stream) -> str`: the path after `base_url`, per mode.
- `parse_reply(data) -> Reply`: a non-streamed reply's JSON (a batch line's too).
- `stream_feeder() -> StreamFeeder`: a new stream's state: events in, chunks out, and
  at last the whole `Reply`.

Stated where the wire differs from the default:

- `stream_decoder() -> Decoder`: the stream's framing, bytes in, events out
  (default: `SSEDecoder()`, server-sent events).
- `call_options(options) -> ModelOptions`: the call's options with the model's
  settings filled in (default: as given).
- `_auth_headers() -> dict`: the credential headers that never change (cached).
- `body_headers(body) -> Mapping | None`: headers a body needs (Anthropic's betas).
- `sign(request: Outgoing)`: per-request credentials over the final request (its
  method, URL, headers and body's bytes; it sets headers): SigV4, a token refreshed
  when it expired. Awaited on the loop: a blocking refresh goes to a thread. Default:
  none.
- `error_said(body, headers) -> ErrorSaid`: what an error reply says (code, message,
  a retry delay the body gives; default: the OpenAI/Anthropic `{"error": ...}` shape).
  The mapping to a typed error by status and hints is shared (`_errors`);
  `typed_error(status, headers, body, sent)` replaces it for a wire whose errors it
  does not read (Google's `google.rpc` errors; default: None, the shared mapping).
- `rate_reading(headers) -> RateReading | None`: what the rate-limit headers say
  (default: `x-ratelimit-*`, `anthropic-ratelimit-*`, `retry-after`).
- `header_tier(headers) -> str | None`: the tier that served a reply, where the wire
  names it in a header rather than the body (Gemini's `x-gemini-service-tier`; default:
  None). A tier the reply's body names wins.
- `prices_as`: the provider id genai-prices knows the wire's models by (default:
  `provider`); pricing itself (declared or genai-prices, batch, tier) is shared.
- `batch_api() -> BatchAPI | None`: its provider batch API (`_batch_wire.BatchAPI`:
  a line's encoding, submission, state, results, a line's reading; default: none;
  the providers' own are in `batch_api`);
  `batch_body(messages, options) -> dict`: a batch line's body (default: the online
  body with no stream and no service tier). A line's reply is read by `parse_reply`
  and priced at batch rates.

Errors inside a 200 reply (an SSE error event, a failed response object, an exception
frame) are raised by the wire as `ErrorEvent(body, status)`; a reply of the wrong shape
raises any of `MALFORMED` (KeyError, TypeError, ...). The skeleton turns both into typed
errors, redacted of the model's secrets. A sketch of a wire, as Gemini's would be:

```python
class GeminiModel(HTTPModel):
    provider = "gemini"
    env_key = "GEMINI_API_KEY"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    prices_as = "google"

    def _auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key}      # Vertex: none here, `sign` instead

    def request_path(self, *, stream: bool) -> str:
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/models/{self.name}:{verb}"

    def build_body(self, messages, options, *, stream):
        return wire.request_body(messages, options, self.capabilities)

    def parse_reply(self, data):
        return wire.reply_of(data)                    # -> Reply(content, tool_calls, ...)

    def stream_feeder(self):
        return wire.StreamState()                     # feed(SSE) / ended / reply()

    def error_said(self, body, headers):
        return wire.error_said(body)                  # status, message, RetryInfo
```

Bedrock's would return an event-stream `Decoder` from `stream_decoder()` (events with
`event` and `data`, as `SSE` has), sign in `sign()` with botocore's SigV4 over
`request.content`, and read `x-amzn-ErrorType` in `error_said`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import pydantic_core

from .._message_input import MessageLike
from ..messages import ContentPart, Message, ToolCall
from ..rates.limits import RateReading, rate_headers, read_rate_headers
from ..usage import Usage
from ._errors import ErrorSaid, read_error_body
from ._sse import SSEDecoder
from ._transport import Outgoing
from .contract import FinishReason, ModelOptions, StreamChunk

if TYPE_CHECKING:
    from ..errors import ProviderError
    from ._batch_wire import BatchAPI

__all__ = [
    "MALFORMED",
    "Decoder",
    "ErrorEvent",
    "ErrorSaid",
    "Event",
    "Reply",
    "StreamFeeder",
    "Wire",
    "json_object",
    "text_field",
]

_NO_OPTIONS = ModelOptions()

# What reading a reply of an unexpected shape raises (pydantic's ValidationError is a
# ValueError; json nesting too deep for the stack a RecursionError): the skeleton turns
# these into a ProviderResponseError, so nothing a reply holds escapes untyped.
MALFORMED: tuple[type[Exception], ...] = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    RecursionError,
)


@dataclass(slots=True)
class Reply:
    """A reply as its wire reads it: all a `ModelResponse` says but what the skeleton
    adds (the price, the provider, the rate reading, the attempts before it).
    `usage` is as the provider counted it, unpriced; `service_tier` is the tier that
    served it, what it is priced at."""

    content: list[ContentPart]
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    usage: Usage
    response_id: str | None = None
    model: str | None = None
    refusal: str | None = None
    service_tier: str | None = None
    iterations: list[dict[str, Any]] | None = None


class Event(Protocol):
    """One event of a stream as its framing delivers it (an SSE event; an AWS
    event-stream message): its name, if any, and its payload's text."""

    @property
    def event(self) -> str | None: ...

    @property
    def data(self) -> str: ...


E_co = TypeVar("E_co", bound=Event, covariant=True)
E_contra = TypeVar("E_contra", bound=Event, contravariant=True)


class Decoder(Protocol[E_co]):
    """A stream's framing, incremental: each chunk of bytes in, the events it completes
    out. Bytes left over at the end are an event cut off (the feeder says whether the
    reply was complete)."""

    def feed(self, chunk: bytes) -> Sequence[E_co]: ...


class StreamFeeder(Protocol[E_contra]):
    """A streamed reply being assembled, one per request.

    `feed` takes each event and returns the chunks it makes (`TextDelta`, `ToolCallDelta`,
    `ReasoningDelta`; a `UsageChunk` with the usage unpriced, the skeleton prices it at
    `service_tier`). `ended`: the last event came (a sentinel, a stop event): read no
    further. `reply()`: the whole reply, or None when the stream stopped before it was
    complete. An error event raises `ErrorEvent`; a malformed one any of `MALFORMED`."""

    ended: bool
    service_tier: str | None

    def feed(self, event: E_contra) -> list[StreamChunk]: ...

    def reply(self) -> Reply | None: ...


class ErrorEvent(Exception):
    """An error a provider sent inside a 200 reply: its error `body` (the JSON as an
    error reply's would be), and `status` when the wire knows the HTTP status it stands
    for (then it maps as an error reply of that status would; else by its code)."""

    def __init__(self, body: Any, status: int | None = None) -> None:
        super().__init__(status)
        self.body, self.status = body, status


def json_object(text: str | bytes) -> dict[str, Any]:
    """`text` as a JSON object (ValueError if it is not JSON; TypeError if not an object)."""
    data = pydantic_core.from_json(text)
    if not isinstance(data, dict):
        raise TypeError("a JSON value that is not an object")
    return data


def text_field(value: object) -> str:
    """A string field of a reply (TypeError otherwise: the reply is malformed)."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


class Wire(ABC):
    """The hooks a wire states (the module's docstring says how to add one);
    `HTTPModel` (`_http`) is this with the steps written once, `request_body` among
    them. `build_body`, `request_path`, `parse_reply` and `stream_feeder` are each
    wire's to state; every other hook has the default below."""

    # The provider id genai-prices knows this wire's models by (None: `provider`).
    prices_as: ClassVar[str | None] = None

    @abstractmethod
    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        """The JSON body of a request, from options the model's settings filled."""

    @abstractmethod
    def request_path(self, *, stream: bool) -> str:
        """The path after `base_url` a request is posted to, streamed or not."""

    @abstractmethod
    def parse_reply(self, data: dict[str, Any]) -> Reply:
        """A non-streamed reply's JSON (or a batch line's), read; `ErrorEvent` for an
        error it carries, any of `MALFORMED` for a shape it does not know."""

    @abstractmethod
    def stream_feeder(self) -> StreamFeeder[Any]:
        """A new stream's state: its events in, chunks and at last the whole reply out."""

    def stream_decoder(self) -> Decoder[Any]:
        """A new stream's framing: server-sent events unless the wire frames otherwise."""
        return SSEDecoder()

    def call_options(self, options: ModelOptions | None) -> ModelOptions:
        """A call's options with what the model's settings fill where it left a gap."""
        return options or _NO_OPTIONS

    def _auth_headers(self) -> dict[str, str]:
        """The credential headers that never change (sent with every request)."""
        return {}

    def body_headers(self, body: dict[str, Any]) -> Mapping[str, str] | None:
        """Headers a request needs because of its body (None: none)."""
        return None

    async def sign(self, request: Outgoing) -> None:
        """Per-request credentials over the final request (its headers may be set): a
        signature over the body's bytes, a token refreshed when it expired."""
        return None

    def error_said(self, body: Any, headers: Mapping[str, str]) -> ErrorSaid:
        """What an error reply's body (its JSON, else its text) and headers say."""
        return read_error_body(body)

    def typed_error(
        self,
        status: int | None,
        headers: Mapping[str, str],
        body: Any,
        sent: dict[str, Any] | None,
    ) -> ProviderError | None:
        """The typed error of an error reply (its JSON, else its text), for a wire whose
        errors the shared mapping (`error_said`, then by status and hints) does not read:
        `status` None for an error event inside a 200 stream, `sent` the request's body
        where known (a tier asked for changes what an error means). None: the shared
        mapping."""
        return None

    def rate_reading(self, headers: Mapping[str, str]) -> RateReading | None:
        """What a reply's rate-limit headers say (None: nothing)."""
        found = rate_headers(headers.items())
        return read_rate_headers(found, time.time()) if found else None

    def header_tier(self, headers: Mapping[str, str]) -> str | None:
        """The tier a reply's headers say served it (None: they say nothing)."""
        return None

    def batch_api(self) -> BatchAPI | None:
        """This model's provider batch API (None: it has none)."""
        return None

    @abstractmethod
    def request_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None, *, stream: bool
    ) -> dict[str, Any]:
        """The body of a call (the skeleton's: `build_body` on its filled options)."""

    def batch_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None
    ) -> dict[str, Any]:
        """The body of a provider-batch line: the online request's, at the batch API's
        own tier and price (no stream, no service tier)."""
        body = self.request_body(messages, options, stream=False)
        body.pop("stream", None)
        body.pop("service_tier", None)
        return body
