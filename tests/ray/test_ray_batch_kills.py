"""A batch item is one logical run, whatever dies (issue #27.2): a batch on Redis
sessions on Ray, with a batch runner and the model gateway SIGKILLed while it runs.

Every item completes and the sink holds it once, and every session's stored history
holds each item's input once and its answer once, in order, alternating as providers
require (a user message, the assistant; each tool call followed by its result), with
each run's turns numbered without a gap. A runner that dies after it stored a turn,
before its result reached the driver, leaves that turn to the item's next attempt,
which goes on after it (or returns the stored answer) instead of storing it again.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from shared_support import ray_pids

import raygent
from raygent import Memory
from raygent._batch import BatchItem
from raygent.actors import RayOptions, ray_backend
from raygent.memory import SavePolicy
from raygent.messages import AssistantMessage, ToolMessage, UserMessage
from raygent.models import OpenAIModel
from raygent.sim import Latency, Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import RedisStore, Scope

# The scenario had 1,000 items on 100 sessions; 200 on 20 show the same: the
# kills (at items 30 and 60) land mid-batch with 16 runs in flight on 20 sessions, each
# session holds ten items in order, and the simulator scans 400 rules a request, not 2,000.
SESSIONS, PER_SESSION = 20, 10
POLICIES: tuple[SavePolicy, ...] = ("message", "turn", "run")


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


def _question(session: int, index: int) -> str:
    return f"s{session} q{index}"


def _rules() -> list[Rule]:
    rules = []
    for s in range(SESSIONS):
        for i in range(PER_SESSION):
            question = _question(s, i)
            rules += [
                Rule(
                    match=Match(last_user=f"^{question}$", after_tool_result=True),
                    reply=Reply(text=f"answer to {question}"),
                ),
                Rule(
                    match=Match(last_user=f"^{question}$"),
                    reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": question})]),
                ),
            ]
    return rules


@pytest.mark.timeout(600)
@pytest.mark.parametrize("policy", POLICIES)
async def test_runners_and_the_gateway_killed_leave_each_item_once_in_its_session(
    policy: SavePolicy, ray_session: None, redis_url: str, tmp_path: Path
) -> None:
    namespace = f"raygent-tests-kills-{uuid.uuid4().hex[:8]}"
    prefix = f"kills-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    killed: dict[str, int] = {}
    with serve(_rules(), latency=Latency(fixed_ms=15, jitter_ms=15)) as sim:
        model = OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-test", max_concurrency=16
        )
        agent = raygent.agent(
            model=model,
            tools=[lookup],
            memory=Memory(store, policy),
            backend=ray_backend(RayOptions(namespace=namespace)),
        )

        def kill(item: BatchItem) -> None:
            # Mid-batch, with runs in flight on every runner: a runner, then the gateway.
            for kind, at in (("Runner", 30), ("Gateway", 60)):
                if kind not in killed and item.index >= at:
                    pids = ray_pids(kind)
                    assert pids, kind
                    killed[kind] = pids[0]
                    os.kill(pids[0], signal.SIGKILL)

        rows = [
            {"input": _question(s, i), "session_id": f"{prefix}-s{s}", "key": f"{s}-{i}"}
            for i in range(PER_SESSION)
            for s in range(SESSIONS)
        ]
        sink = tmp_path / "out.jsonl"
        result = await raygent.batch(
            agent, rows, concurrency=16, runners=2, sink=sink, on_item=kill, progress=False
        )
    assert set(killed) == {"Runner", "Gateway"}
    assert result.report.failed == 0 and result.report.succeeded == len(rows), result.report
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == sorted(row["key"] for row in rows)  # every item once in the sink
    for s in range(SESSIONS):
        scope = Scope(f"{prefix}-s{s}")
        stored = await store.get_conversation(store.ref(scope))
        questions = [_question(s, i) for i in range(PER_SESSION)]
        _assert_one_run_each([m.message for m in stored], questions)
        turns: dict[str, list[int]] = {}
        for m in stored:
            turns.setdefault(m.run_id, [])
            if m.turn not in turns[m.run_id]:
                turns[m.run_id].append(m.turn)
        assert len(turns) == PER_SESSION  # one run per item, whatever its attempts
        for run_turns in turns.values():
            assert run_turns == list(range(len(run_turns)))  # contiguous, in order
        await store.clear(scope)
    await store.aclose()


def _assert_one_run_each(history: list[Any], questions: list[str]) -> None:
    """Each question once as a user message, in order, answered once; every tool call
    followed by exactly its result, then the assistant."""
    asked = [m.text for m in history if isinstance(m, UserMessage)]
    assert asked == questions, asked
    answers = [m.text for m in history if isinstance(m, AssistantMessage) and not m.tool_calls]
    assert answers == [f"answer to {q}" for q in questions], answers
    for at, message in enumerate(history):
        following = history[at + 1] if at + 1 < len(history) else None
        if isinstance(message, UserMessage):
            assert isinstance(following, AssistantMessage), (at, history)
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            assert isinstance(following, ToolMessage), (at, history)
            assert following.call_id == message.tool_calls[0].call_id
