"""A durable run holds its place in its session's order until it ends: a run that
arrives while it waits for approval goes after it; abandoning it lets the others on."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import pytest
from test_durable_approval import SCRIPT, make_tools, model

import raygent
from raygent import Approve, Durable
from raygent.sim import serve
from raygent.stores import Scope, SQLiteStore


async def held_message(caplog: pytest.LogCaptureFixture, timeout: float = 30.0) -> None:
    """Bounded wait until a run logs that it waits for the session's hold."""
    deadline = time.monotonic() + timeout
    while not any("is held by durable run" in r.getMessage() for r in caplog.records):
        if time.monotonic() > deadline:
            raise AssertionError("no run waited for the session's hold")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("end", ["resume", "abandon"])
async def test_a_run_waits_for_the_durable_run_that_holds_its_session(
    end: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="raygent.memory")
    store = SQLiteStore(tmp_path / "s.db")
    session = f"s-{uuid.uuid4().hex[:8]}"
    memory = raygent.Memory(store=store, save_policy="message")
    async with serve(SCRIPT) as sim:
        durable_bot = raygent.agent(
            model=model("openai", sim),
            tools=make_tools(tmp_path / "sent"),
            durable=Durable(store=store),
            memory=memory,
        )
        plain_bot = raygent.agent(model=model("openai", sim), memory=memory)
        paused = await durable_bot.execute("Message ann and bob.", session_id=session)
        assert paused.status == "awaiting_approval"
        later = asyncio.ensure_future(plain_bot.execute("And then?", session_id=session))
        await held_message(caplog)
        assert not later.done()
        if end == "resume":
            decisions = {p.call_id: Approve() for p in paused.pending}
            first = await durable_bot.resume(paused.run_id, approvals=decisions)
        else:
            first = await durable_bot.abandon(paused.run_id)
        second = await asyncio.wait_for(later, timeout=30)
        history = await store.load(Scope(session))
    await store.aclose()
    assert second.ok, second.error
    users = [m.text for m in history if m.role == "user"]
    assert users == ["Message ann and bob.", "And then?"]
    if end == "resume":
        assert first.ok, first.error
        # The durable run's whole turn comes before the run that waited.
        roles = [m.role for m in history]
        assert roles[:6] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
        assert history[6].text == "And then?"
    else:
        assert first.status == "cancelled"
        assert history[1].text == "And then?"  # right after the abandoned run's input
