"""What a wire's provider batch API states (`BatchAPI`), and what it says of a batch
(`BatchState`) and of each line (`LineResult`, kept with the model contract, which the
provider-batch seam carries too): the shapes `HTTPModel.batch_api`
returns and the provider-batch pool reads. The providers' own APIs are `batch_api`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import ProviderBatchError
from .contract import LineOutcome, LineResult

__all__ = ["BatchAPI", "BatchState", "LineOutcome", "LineResult", "MinimumLines"]


@dataclass(frozen=True, slots=True)
class BatchState:
    """A provider batch as its provider last described it."""

    id: str
    status: str  # the provider's own word ("in_progress", "ended", "completed", ...)
    ended: bool
    created_at: float | None = None
    ended_at: float | None = None
    # The batch as a whole was refused (validation of its file): every line fails so.
    failure: ProviderBatchError | None = None
    files: tuple[str, ...] = ()  # OpenAI: its output and error file ids


class BatchAPI(Protocol):
    """What the provider-batch pool needs of a provider."""

    provider: str
    endpoint: str  # the URL lines name ("/v1/chat/completions", "/v1/messages")
    max_lines: int
    max_bytes: int

    def encode(self, custom_id: str, body: bytes) -> bytes:
        """One line, as it goes in a batch (less its separator: a batch's size is the
        lines' and one byte each); `body` is the request body's JSON."""
        ...

    async def submit(self, lines: Sequence[bytes], tag: str) -> str: ...

    async def find(self, tag: str, since: float, lines: int) -> str | None: ...

    async def state(self, batch_id: str) -> BatchState: ...

    async def results(self, state: BatchState) -> bytes: ...

    async def cancel(self, batch_id: str) -> None: ...

    def read_line(self, line: bytes) -> LineResult: ...


@runtime_checkable
class MinimumLines(Protocol):
    """A batch API whose batches take at least `min_lines` lines (Bedrock's jobs, 100
    records): a smaller group is gathered longer, then its lines go online."""

    min_lines: int
