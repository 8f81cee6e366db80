"""A run whose id wrote to its session before (its process died with its result: a
batch runner SIGKILLed, a driver resumed) goes on after what the store holds of it, or
returns its stored answer without a request: one logical run, turns contiguous.

Here the earlier attempt is a run that failed after its first tool turn was stored, or
one that completed; the next is the same run id with `recover=True` in its attempt
state (`raygent.seams.attempt`), as a batch gives an item's attempt after its runner died
(tests/ray/test_ray_batch.py kills runners).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import raygent
from raygent import Memory
from raygent.errors import InvalidRequestError
from raygent.memory import SavePolicy
from raygent.messages import ToolMessage
from raygent.seams import RunScope
from raygent.stores import Scope, SQLiteStore
from raygent.testing import FunctionModel, call, reply

POLICIES: tuple[SavePolicy, ...] = ("message", "turn", "run")

# As a batch runs an item again after its runner died: its run recovers what it stored.
RECOVER = RunScope(recover=True)


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


class Model:
    """A tool call, then the answer; `fail` makes the answer trip fail (not retryable)."""

    def __init__(self) -> None:
        self.fail = False
        self.requests = 0

    def __call__(self, messages: list[Any], options: Any) -> Any:
        self.requests += 1
        if not isinstance(messages[-1], ToolMessage):
            return reply(tool_calls=[call("lookup", {"q": "owls"}, call_id="c1")])
        if self.fail:
            raise InvalidRequestError("the answer trip failed", provider="test", status=400)
        return reply("Owls hoot.")


def _agent(tmp_path: Path, model: Model, policy: SavePolicy) -> raygent.Agent:
    store = SQLiteStore(str(tmp_path / "s.db"))
    return raygent.agent(
        model=FunctionModel(model), tools=[lookup], memory=Memory(store, save_policy=policy)
    )


async def _stored(tmp_path: Path) -> list[tuple[str, int, str]]:
    store = SQLiteStore(str(tmp_path / "s.db"))
    try:
        rows = await store.get_conversation(store.ref(Scope("s")))
        return [(r.run_id, r.turn, r.message.role) for r in rows]
    finally:
        await store.aclose()


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_run_that_stored_a_turn_goes_on_after_it(
    tmp_path: Path, policy: SavePolicy
) -> None:
    model = Model()
    bot = _agent(tmp_path, model, policy)
    model.fail = True
    first = await bot.execute("Owls?", session_id="s", run_id="item-1")
    assert first.error is not None
    model.fail, model.requests = False, 0
    again = await bot.execute("Owls?", session_id="s", run_id="item-1", scope=RECOVER)
    assert again.ok and again.text == "Owls hoot."
    stored = await _stored(tmp_path)
    roles = [role for _, _, role in stored]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the input once
    turns = sorted({turn for _, turn, _ in stored})
    assert turns == list(range(len(turns)))  # contiguous, from 0
    # Only what was not stored is asked again: the answer trip alone, unless `run`
    # (which stored nothing of the failed attempt) runs its tool trip again too.
    assert model.requests == (2 if policy == "run" else 1)


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_run_whose_answer_is_stored_returns_it_without_a_request(
    tmp_path: Path, policy: SavePolicy
) -> None:
    model = Model()
    bot = _agent(tmp_path, model, policy)
    assert (await bot.execute("Owls?", session_id="s", run_id="item-1")).ok
    before = await _stored(tmp_path)
    model.requests = 0
    again = await bot.execute("Owls?", session_id="s", run_id="item-1", scope=RECOVER)
    assert again.ok and again.text == "Owls hoot." and model.requests == 0
    assert await _stored(tmp_path) == before


async def test_without_recover_a_new_run_id_is_a_new_run(tmp_path: Path) -> None:
    model = Model()
    bot = _agent(tmp_path, model, "message")
    assert (await bot.execute("Owls?", session_id="s")).ok
    assert (await bot.execute("Owls?", session_id="s")).ok
    roles = [role for _, _, role in await _stored(tmp_path)]
    assert roles.count("user") == 2  # two runs, two questions


def test_run_options_are_only_what_users_pass() -> None:
    """A batch's internal state (a job's ledger, a retry's continuation, recovery) is set
    around the attempt (`raygent.seams.attempt`), not passed as run options."""
    from raygent.agents import RunOptions

    assert not {"job_budget", "continues", "recover"} & set(RunOptions.__annotations__)
