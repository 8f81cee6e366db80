"""What the durable-run tests share with the process they kill: the agent, its tools,
its stores, the simulator's scripts. The child (durable_child.py) builds the agent from
the same config as the test that resumes it, so both are the same agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import raygent
from raygent import Memory, Pricing
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply
from raygent.stores import RedisStore, SQLiteStore

HERE = Path(__file__).resolve().parent
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
# Where the slow tool says it started, and the file whose existence releases it.
MARKS_ENV = "RAYGENT_TEST_DURABLE_MARKS"


@raygent.tool
def step(n: int) -> str:
    """Do step n."""
    return f"step {n} done"


@raygent.tool
async def slow_step(n: int) -> str:
    """Do step n, slowly: waits until the test releases it."""
    import asyncio

    marks = Path(os.environ[MARKS_ENV])
    with (marks / "starts").open("a") as f:
        f.write(f"{n} {os.getpid()}\n")
    await asyncio.to_thread(wait_for_file_lines, marks / "release", 1, 120.0)
    return f"slow step {n} done"


def tool_reply(name: str, n: int) -> Reply:
    return Reply(text=f"Doing {n}.", tool_calls=[ToolCallReply(name, {"n": n})])


FINAL = Reply(text="All steps are done.")
HANG = Reply(fault=Fault(kind="hang"))


def script(*replies: Reply) -> list[Rule]:
    """One reply per request, in order."""
    return [Rule(match=Match(), reply=list(replies), times=len(replies))]


# Stores this process opened: the folder's conftest closes them after each test.
OPENED: list[Any] = []


def build_store(spec: dict[str, Any]) -> Any:
    store: Any
    if spec["kind"] == "sqlite":
        store = SQLiteStore(spec["path"])
    else:
        store = RedisStore(spec["url"], prefix=spec["prefix"])
    OPENED.append(store)
    return store


def build_agent(config: dict[str, Any], **kwargs: Any) -> raygent.Agent:
    store = build_store(config["store"])
    if config["provider"] == "openai":
        model: Any = raygent.OpenAIModel(
            "sim-gpt", base_url=config["openai_url"], api_key="sk-durable", pricing=PRICING
        )
    else:
        model = raygent.AnthropicModel(
            "sim-claude", base_url=config["anthropic_url"], api_key="sk-durable", pricing=PRICING
        )
    options: dict[str, Any] = {
        "model": model,
        "tools": [step, slow_step],
        "system_prompt": "Do the steps.",
        "durable": raygent.Durable(store=store, delete_on_complete=False),
        "memory": Memory(store=store, save_policy=config.get("policy", "message")),
        "max_trips": 6,
        **kwargs,
    }
    return raygent.agent(**options)


def sim_config(sim: Any, provider: str, store: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "openai_url": sim.openai_base_url,
        "anthropic_url": sim.anthropic_base_url,
        "store": store,
        **more,
    }


def batch_items(count: int) -> list[dict[str, Any]]:
    """Even items answer at once; odd ones are the long runs (their script hangs)."""
    return [
        {"key": f"k{i}", "input": f"item {i} {'odd' if i % 2 else 'even'}"} for i in range(count)
    ]


def spawn(
    config: dict[str, Any], marks: Path, child: str = "durable_child.py"
) -> subprocess.Popen[str]:
    """The child process: runs the durable agent until it is killed (or ends)."""
    env = {**os.environ, MARKS_ENV: str(marks), "RAYGENT_BACKEND": "local"}
    return subprocess.Popen(
        [sys.executable, str(HERE / child), json.dumps(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_file_lines(path: Path, lines: int, timeout: float = 30.0) -> list[str]:
    """Bounded wait until `path` has `lines` lines (a condition, not a sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        found = text.splitlines()
        if len(found) >= lines:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} has {len(found)} lines, not {lines}, in {timeout}s")
        time.sleep(0.02)


async def file_lines(path: Path, lines: int, timeout: float = 60.0) -> list[str]:
    """`wait_for_file_lines` off the loop, so the simulator on it keeps serving."""
    import asyncio

    return await asyncio.to_thread(wait_for_file_lines, path, lines, timeout)


async def entries_written(store: Any, run_id: str, count: int, timeout: float = 60.0) -> None:
    """Bounded wait until the durable run has `count` entries in the store."""
    import asyncio

    from raygent.stores import Scope

    deadline = time.monotonic() + timeout
    while True:
        record = await store.load_run(Scope(run_id))
        if record is not None and len(record.entries) >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} did not reach {count} entries in {timeout}s")
        await asyncio.sleep(0.02)
