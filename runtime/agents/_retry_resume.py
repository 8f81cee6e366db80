"""A retry that continues its failed attempt: one logical run on the session, not two.

A batch retries an item whose run failed; on a session, the failed attempt may have
stored its input already (save policy `message`, or `turn` after a first tool turn), or
even its answer (an append that committed though its reply was lost). A fresh run would
store the question again (`[user Q, user Q, assistant A]`). Instead the retry is given
the failed attempt's result (run option `continues`): it keeps the run's id, numbers its
appends after the attempt's, and when it opens the session it looks for how much of the
attempt's new messages the store holds: the longest k such that the stored history ends
with the attempt's first k new messages.

- k == 0: nothing of the attempt is stored: a fresh run.
- k >= 1: those k messages are the run's own, stored: they are not added or saved
  again; the run trips from there (the attempt's unsaved messages are dropped).
- the k-th is a final answer (an assistant message without tool calls): the answer is
  stored, and the run returns it, completed, without a model trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..abort import AbortSignal
from ..memory import Memory, SessionPersistence
from ..memory.save import RunSaver
from ..messages import AssistantMessage, Message
from ..observers.report import AgentResult, RunTrail
from ._state import RunState

if TYPE_CHECKING:
    from raygent.stores.protocol import Scope, StoredMessage

__all__ = [
    "ContinuingSaver",
    "continue_stored",
    "continued_run_id",
    "saver_for",
    "stored_answer",
    "stored_count",
    "with_trail",
]


def stored_count(history: Sequence[Message], messages: Sequence[Message]) -> int:
    """The longest k such that `history` ends with the first k of `messages`."""
    for k in range(min(len(history), len(messages)), 0, -1):
        if list(history[len(history) - k :]) == list(messages[:k]):
            return k
    return 0


def continued_run_id(continues: AgentResult | None) -> str | None:
    """The run id a retry keeps: its failed attempt's."""
    return None if continues is None else continues.report.run_id


class ContinuingSaver(RunSaver):
    """The saver of a retry: splits the stored history into what was there before
    (returned by `open`) and the tail that is its earlier attempts' own (`stored`), and
    numbers its appends right after theirs.

    With the failed attempt's `trail` (a retry in the same process), the tail is the
    longest start of the trail's messages the history ends with. Without one (the
    process that ran the attempt died with its result), the store says it: the
    messages at the end of the history written under this run's id. Either way the
    next append's number follows the last one the store holds for the run, so the
    run's turns stay contiguous even when an append failed without committing.
    """

    def __init__(
        self,
        memory: Memory,
        scope: Scope,
        persistence: SessionPersistence,
        run_id: str,
        trail: RunTrail | None,
    ) -> None:
        super().__init__(
            memory, scope, persistence, run_id, first_turn=0 if trail is None else trail.turns
        )
        self.trail = trail
        self.stored: list[Message] = []
        self.opened = False

    async def open(self, signal: AbortSignal | None = None) -> list[Message]:
        history = await super().open(signal)
        written = await _written_by(self.memory, self.scope, self.run_id)
        if self.trail is None:
            k = _tail_of(written, len(history), self.run_id)
        else:
            k = stored_count(history, self.trail.messages)
        turns = [w.turn for w in written if w.run_id == self.run_id and w.turn >= 0]
        self.restore(max(turns, default=-1) + 1, ())
        cut = len(history) - k
        self.stored = history[cut:]
        self.opened = True
        return history[:cut]


async def _written_by(memory: Memory, scope: Scope, run_id: str) -> list[StoredMessage]:
    """The session's messages with who wrote them (read once, by a retry only)."""
    store = memory.store
    return list(await store.get_conversation(store.ref(scope)))


def _tail_of(written: Sequence[StoredMessage], length: int, run_id: str) -> int:
    """How many messages at the end of the history (the first `length` of `written`)
    the run `run_id` wrote."""
    count = 0
    for message in reversed(written[:length]):
        if message.run_id != run_id or message.turn < 0:
            break
        count += 1
    return count


def saver_for(
    memory: Memory,
    scope: Scope,
    persistence: SessionPersistence,
    run_id: str,
    continues: AgentResult | None,
    *,
    recover: bool = False,
) -> RunSaver:
    """A run's saver: a continuing one for a retry whose attempt left a trail, or for a
    run whose id may have written before (`recover`: the store says what)."""
    trail = None if continues is None else continues.trail
    if trail is None and not recover:
        return RunSaver(memory, scope, persistence, run_id)
    return ContinuingSaver(memory, scope, persistence, run_id, trail)


def continue_stored(run: RunState) -> bool:
    """After `open`: take the failed attempt's stored messages as this run's own, already
    saved. False: nothing was stored (the run starts from its input)."""
    saver = run.saver
    if not isinstance(saver, ContinuingSaver) or not saver.stored:
        return False
    run.add(*saver.stored)
    run.unsaved()  # handed over: they are in the store
    return True


def stored_answer(run: RunState) -> AgentResult | None:
    """The run's answer, when the failed attempt stored it: the result, without a trip."""
    saver = run.saver
    if not isinstance(saver, ContinuingSaver) or not saver.stored:
        return None
    last = saver.stored[-1]
    if not isinstance(last, AssistantMessage) or last.tool_calls:
        return None
    text = last.text
    output = run.config.output
    data = None if output is None else output.validate(text)
    return AgentResult(data=data, text=text, blocks=None, report=run.report, usage=run.usage)


def with_trail(run: RunState, result: AgentResult) -> AgentResult:
    """A run on a session that did not complete leaves what its retry continues from."""
    saver = run.saver
    if saver is not None and result.report.status != "completed":
        messages = tuple(run.new_messages)
        if isinstance(saver, ContinuingSaver) and not saver.opened:
            # It failed before it saw the store (the session could not be opened): what
            # the store may hold is still the earlier attempts' doing.
            messages = () if saver.trail is None else saver.trail.messages
        result.trail = RunTrail(messages, saver.turns)
    return result
