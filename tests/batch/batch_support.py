"""Helpers for the batch and eval tests: executables, test agents, a sleep recorder.

Importable as `batch_support` (pytest) and as `tests.batch.batch_support` (the CLI
subprocesses, run from the repository root).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import raygent
from raygent._batch import Retry
from raygent.messages import Message
from raygent.models import ModelOptions
from raygent.testing import FunctionModel

ROOT = Path(__file__).resolve().parents[2]


class Sleeps:
    """A `Retry.sleep` that records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def fast_retry(sleeps: Sleeps | None = None, **options: Any) -> Retry:
    """A Retry without jitter whose waits are recorded, not slept."""
    options.setdefault("jitter", False)
    return Retry(sleep=sleeps or Sleeps(), **options)


async def yield_a_few(times: int = 3) -> None:
    """Let other tasks run, so that calls overlap (a yield, not a wait for anything)."""
    for _ in range(times):
        await asyncio.sleep(0)


def _shout(messages: list[Message], options: ModelOptions) -> str:
    return messages[-1].text.upper()


def shouting_agent() -> raygent.Agent:
    """An agent whose model answers with the last message in capitals."""
    return raygent.agent(model=FunctionModel(_shout), name="shout")


# For the CLI tests: `tests.batch.batch_support:echo_agent`, `...:double_or_hang`.
echo_agent = shouting_agent()


HANG_FROM = "RAYGENT_TEST_HANG_FROM"


async def double_or_hang(item: dict[str, Any]) -> dict[str, Any]:
    """Doubles `n` after a short while (a model call); items from $RAYGENT_TEST_HANG_FROM
    on never end, so that a driver stopped mid-batch is stopped mid-batch for sure."""
    if item["n"] >= int(os.environ.get(HANG_FROM, sys.maxsize)):
        await asyncio.Event().wait()
    await asyncio.sleep(0.002)
    return {"double": item["n"] * 2}


async def fails_on_odd(item: dict[str, Any]) -> int:
    if item["n"] % 2:
        raise ValueError(f"odd: {item['n']}")
    return int(item["n"])


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def raygent_cli(*args: str, **popen: Any) -> subprocess.Popen[str]:
    """`python -m raygent ARGS` from the repository root (so tests.batch... imports),
    unless `cwd=` says where."""
    popen.setdefault("cwd", ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "raygent", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "it") -> None:
    """Poll `check` (a file another process writes) until true, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# For the CLI's cost line: the same agent with prices declared on its model.
priced_echo_agent = raygent.agent(
    model=FunctionModel(_shout, pricing=raygent.Pricing(input_per_mtok=1.0, output_per_mtok=2.0)),
    name="shout",
)


@raygent.tool
def broken_lookup(q: str) -> str:
    """Look something up (the service is down)."""
    raise RuntimeError(f"lookup service down for {q}")


def _lookup_then_answer(messages: list[Message], options: ModelOptions) -> Any:
    from raygent.testing import call, reply

    if messages[-1].role == "tool":
        return "answered without the lookup"
    return reply(tool_calls=[call("broken_lookup", {"q": messages[-1].text})])


# For the CLI's tool errors: an agent whose only tool always fails.
broken_tool_agent = raygent.agent(
    model=FunctionModel(_lookup_then_answer), tools=[broken_lookup], name="broken"
)


def sim_agent_module(folder: Path, name: str, key: str = "sk-test", **agent: str) -> str:
    """A module in `folder` whose `agent` asks an OpenAI model at $SIM_URL with `key`
    (`agent`: keywords of `raygent.agent`, as source): for the CLI, run from `folder`.
    Returns its target, `name:agent`."""
    keywords = "".join(f", {k}={v}" for k, v in agent.items())
    (folder / f"{name}.py").write_text(
        "import os\n"
        "import raygent\n"
        "from raygent.models import OpenAIModel\n"
        f"model = OpenAIModel('gpt-4o', base_url=os.environ['SIM_URL'], api_key={key!r})\n"
        f"agent = raygent.agent(model=model{keywords})\n"
    )
    return f"{name}:agent"


def cli_on_sim(
    sim_url: str, folder: Path, target: str, items: int, *args: str
) -> tuple[int, str, Path]:
    """`raygent batch TARGET` over `items` inputs into `folder/out.jsonl`, locally, run from
    `folder` with $SIM_URL set: (its exit status, its stderr, the sink)."""
    source = write_jsonl(folder / "in.jsonl", [{"input": f"q{n}"} for n in range(items)])
    sink = folder / "out.jsonl"
    proc = raygent_cli(
        *("batch", target, str(source), "-o", str(sink), "--backend", "local", *args),
        cwd=folder,
        env={**os.environ, "SIM_URL": sim_url},
    )
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err, sink
