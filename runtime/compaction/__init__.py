"""`raygent.compaction`: long runs stay inside a context window by summarising older
messages (the whole story is in `policy`).

policy        `Compaction`, the context and result of a summariser, the records in a
              report, `summarize(model=...)`
_transcript   a slice of the conversation as a transcript for a summariser model
ranges        where a compaction may cut: the safe slice of older messages
stored        compaction of a session's stored history, under the run's lease

The step that compacts before each trip is the agent's (agents/_compact.py).
May import the base and memory.
"""

from ._transcript import render_transcript
from .policy import (
    DEFAULT_INSTRUCTIONS,
    Compaction,
    CompactionContext,
    CompactionRecord,
    CompactionResult,
    CountTokens,
    SkipReason,
    Summarizer,
    SummaryError,
    summarize,
)

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "Compaction",
    "CompactionContext",
    "CompactionRecord",
    "CompactionResult",
    "CountTokens",
    "SkipReason",
    "Summarizer",
    "SummaryError",
    "render_transcript",
    "summarize",
]
