"""ConverseStream on the skeleton: AWS's binary event stream as a `Decoder` (botocore's
`EventStreamBuffer` parses the frames and checks their CRCs), and the wire's
`StreamState` as a `StreamFeeder` whose reply is the skeleton's `Reply`. A reply's
stop reason that is a failure (a guardrail's intervention, content filtered) raises
its typed error, as a non-streamed reply's does (`as_reply`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContentFilterError, ProviderResponseError
from . import _bedrock_wire as wire
from ._aws import StreamEvent, _botocore_missing
from ._wire import Reply
from .contract import StreamChunk

__all__ = ["BedrockFeeder", "EventStreamDecoder", "FrameEvent", "as_reply"]


@dataclass(frozen=True, slots=True)
class FrameEvent(StreamEvent):
    """An event-stream message as the skeleton's `Event`: its kind and its payload's text."""

    @property
    def event(self) -> str | None:
        return self.kind

    @property
    def data(self) -> str:
        return self.payload.decode("utf-8", "replace")


class EventStreamDecoder:
    """Event-stream messages as their bytes arrive; a message cut off by the end of the
    stream is never returned (the feeder says whether the reply was complete)."""

    __slots__ = ("_buffer", "_error")

    def __init__(self) -> None:
        try:
            from botocore.eventstream import EventStreamBuffer, ParserError
        except ImportError:
            raise _botocore_missing() from None
        self._buffer = EventStreamBuffer()
        self._error = ParserError

    def feed(self, chunk: bytes) -> list[FrameEvent]:
        self._buffer.add_data(chunk)
        out: list[FrameEvent] = []
        try:
            for message in self._buffer:
                headers = dict(message.headers)
                kind = str(headers.get(":message-type", "event"))
                name = (
                    headers.get(":event-type")
                    or headers.get(":exception-type")
                    or headers.get(":error-code")
                    or ""
                )
                out.append(FrameEvent(kind, str(name), bytes(message.payload), headers))
        except self._error as exc:
            raise ProviderResponseError(
                f"bedrock: a damaged event-stream frame ({type(exc).__name__}: {exc})",
                provider=wire.PROVIDER,
            ) from None
        return out


def as_reply(read: wire.Reply) -> Reply:
    """The wire's reading of a Converse reply as the skeleton's `Reply` (usage unpriced).
    A guardrail's intervention or a malformed model output raises its typed error;
    content filtered is a refusal (finish "refusal"), as other wires' refusals are, which
    the agent fails with `RefusalError`."""
    failed = wire.stop_error(read)
    if failed is not None and type(failed) is not ContentFilterError:
        raise failed
    response = read.response
    return Reply(
        content=list(response.content),
        tool_calls=list(response.tool_calls),
        finish_reason=response.finish_reason,
        usage=response.usage,
        model=response.model,
        refusal=response.refusal,
        service_tier=response.service_tier,
    )


class BedrockFeeder:
    """A ConverseStream reply being assembled: `metadata` (usage, the tier served) is
    the last event Bedrock sends, after `messageStop`."""

    __slots__ = ("_state", "ended", "service_tier")

    def __init__(self, model: str) -> None:
        self._state = wire.StreamState(model=model)
        self.ended = False
        self.service_tier: str | None = None

    def feed(self, event: FrameEvent) -> list[StreamChunk]:
        chunks = self._state.feed(event)
        self.ended = self._state.complete
        self.service_tier = self._state.service_tier
        return chunks

    def reply(self) -> Reply | None:
        if not self._state.complete:
            return None
        return as_reply(self._state.reply())
