"""raygent in a real Jupyter kernel (ipykernel, driven by nbclient): the example notebook
runs clean on both backends, a kernel interrupt mid-batch cancels it cleanly and resume
completes it, and `raygent.init()` re-run (or after a kernel restart) starts no second
Ray and leaks no actors.

"Clean" means: no error output, and nothing on stderr but Ray's INFO log lines (a
warning, a traceback, tqdm's "IProgress not found" all fail). On Ray the kernel joins
the suite's Ray (RAY_ADDRESS), as `raygent.init()` does for a user with a cluster up.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply, serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"
CELL_TIMEOUT = 60
# What may appear on a cell's stderr: Ray's own INFO lines ("Connecting to existing Ray
# cluster ..."). Anything else (a warning, a traceback, a stray print) fails.
RAY_INFO = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\tINFO \S+ -- ")


def kernel_env(backend: str) -> dict[str, str]:
    env = dict(os.environ)
    env["RAYGENT_BACKEND"] = backend
    env.pop("RAY_ADDRESS", None)
    if backend == "ray":
        import ray

        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return env


def problems(nb: Any) -> list[str]:
    """Every error output and every stderr line that is not a Ray INFO line."""
    found = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"cell {index}: {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and out.name == "stderr":
                lines = [line for line in out.text.splitlines() if line.strip()]
                found += [
                    f"cell {index} stderr: {line}" for line in lines if not RAY_INFO.match(line)
                ]
    return found


# A line Ray forwards to every driver of the cluster from its processes, tagged with its
# source: "(raylet) WARNING: 14 PYTHON worker processes have been started...", "(pid=1) ..."
# (a kernel that joins the suite's Ray hears of the other tests' workers).
_RAY_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)?\((raylet|gcs_server|\w* ?pid=\d+)[^)]*\)")


def stdout(cell: Any) -> str:
    """What the cell printed, less the lines Ray forwarded from its processes."""
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
    return "".join(
        line for line in text.splitlines(keepends=True) if not _RAY_FORWARDED.match(line)
    )


def mimetypes(cell: Any) -> set[str]:
    return {key for o in cell.outputs for key in o.get("data", {})}


def backend_param() -> Any:
    return pytest.mark.parametrize("backend", ["local", "ray"])


@pytest.fixture
def ray_if_needed(request: pytest.FixtureRequest, backend: str) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_session")


# -- the example notebook ---------------------------------------------------------------


@backend_param()
@pytest.mark.usefixtures("ray_if_needed")
def test_the_example_notebook_runs_clean(backend: str, tmp_path: Path) -> None:
    nb = nbformat.read(EXAMPLE, as_version=4)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute(env=kernel_env(backend))
    assert problems(nb) == []
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    text = "".join(stdout(cell) for cell in code)
    assert "completed city='Paris' temp_c=15.0" in text
    assert "You are Ada. | 6 messages stored" in text  # the second turn saw the first
    assert "8 of 8 completed" in text
    assert "True 1.0" in text  # the eval passed
    shown = [mimetypes(cell) for cell in code]
    assert sum("text/html" in kinds for kinds in shown) >= 4  # result, batch, report, eval
    # ipywidgets is installed in the test env: the bar is a widget, not a text bar.
    assert any("application/vnd.jupyter.widget-view+json" in kinds for kinds in shown)
    assert eval(code[0].outputs[-1].data["text/plain"]) == backend


# -- a kernel driven cell by cell ---------------------------------------------------------


class Kernel:
    """A kernel of its own, cells run one at a time (and interrupted, restarted)."""

    def __init__(self, client: NotebookClient) -> None:
        self.client = client
        self.nb = client.nb

    async def run(self, source: str, raises: str | None = None) -> Any:
        """Run `source` as a new cell; it must end clean, or with the error `raises`."""
        cell = new_code_cell(source)
        self.nb.cells.append(cell)
        if raises is not None:
            cell.metadata["tags"] = ["raises-exception"]
        await self.client.async_execute_cell(cell, len(self.nb.cells) - 1)
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        assert errors == ([] if raises is None else [raises])
        cell.outputs = [o for o in cell.outputs if o.output_type != "error"]
        assert problems(new_notebook(cells=[cell])) == []
        return cell

    async def restart(self) -> None:
        await self.client.km.restart_kernel()
        await self.client.kc.wait_for_ready(timeout=CELL_TIMEOUT)


@pytest.fixture
async def kernel(backend: str, tmp_path: Path, ray_if_needed: None) -> AsyncIterator[Kernel]:
    client = NotebookClient(
        new_notebook(),
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": tmp_path}},
    )
    async with client.async_setup_kernel(env=kernel_env(backend)):
        yield Kernel(client)


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """A bounded wait on a condition."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout:g}s: {what}")
        await asyncio.sleep(0.01)


# -- interrupting the kernel mid-batch ----------------------------------------------------

FAST, SLOW = 6, 4
INTERRUPT_SCRIPT = [
    # The first SLOW requests for a slow item hang (until the interrupt closes them);
    # later ones (the resumed batch) answer at once.
    Rule(match=Match(last_user="slow"), reply=Reply(text="late", latency_ms=120_000), times=SLOW),
    Rule(match=Match(), reply=Reply(text="done")),
]

SETUP = """
import json
from pathlib import Path
import raygent

bot = raygent.agent(model=raygent.OpenAIModel("sim-gpt", base_url={url!r}, api_key="sk-sim"))
items = [{{"id": f"fast-{{i}}", "input": f"fast {{i}}"}} for i in range({fast})]
items += [{{"id": f"slow-{{i}}", "input": f"slow {{i}}"}} for i in range({slow})]
"""

SYNC_BATCH = """
options = dict(concurrency=16, sink={sink!r}, resume={resume}, progress=False)
result = raygent.batch_sync(bot, items, **options)
print(json.dumps([result.report.succeeded, {{i.key: i.status for i in result.items}}]))
"""

AWAITED_BATCH = """
options = dict(concurrency=16, sink={sink!r}, resume={resume}, progress=False)
result = await raygent.batch(bot, items, **options)
print(json.dumps([result.report.succeeded, {{i.key: i.status for i in result.items}}]))
"""


def sink_records(path: Path) -> list[dict[str, Any]]:
    """The sink's lines, each one valid JSON (a torn line fails the test)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def sink_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("backend", ["local"])
@pytest.mark.parametrize("form", [SYNC_BATCH, AWAITED_BATCH], ids=["batch_sync", "await_batch"])
async def test_a_kernel_interrupt_mid_batch_cancels_it_and_resume_completes_it(
    kernel: Kernel, form: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    with serve(INTERRUPT_SCRIPT) as sim:
        await kernel.run(SETUP.format(url=sim.openai_base_url, fast=FAST, slow=SLOW))
        running = asyncio.ensure_future(kernel.run(form.format(sink=str(sink), resume=False)))
        await until(
            lambda: sink_lines(sink) >= FAST and sim.stats().in_flight == SLOW,
            "the fast items recorded and the slow ones in flight",
        )
        await kernel.client.km.interrupt_kernel()
        cell = await running
        # With a sink the result keeps the items that did not complete (memory stays
        # bounded); the completed ones are counted, and in the sink.
        succeeded, unfinished = json.loads(stdout(cell).splitlines()[-1])
        assert (succeeded, unfinished) == (FAST, {f"slow-{i}": "cancelled" for i in range(SLOW)})
        await in_flight_closed(sim)
        records = sink_records(sink)
        keys = [record["key"] for record in records]
        assert len(keys) == len(set(keys))  # each key at most once
        assert {r["key"]: r["status"] for r in records} == {
            **{f"fast-{i}": "completed" for i in range(FAST)},
            **unfinished,
        }

        cell = await kernel.run(form.format(sink=str(sink), resume=True))
        assert json.loads(stdout(cell).splitlines()[-1]) == [SLOW, {}]  # the rest, run
        records = sink_records(sink)
        assert sorted(r["key"] for r in records) == sorted(
            [f"fast-{i}" for i in range(FAST)] + [f"slow-{i}" for i in range(SLOW)]
        )
        assert {r["status"] for r in records} == {"completed"}


async def in_flight_closed(sim: Simulator) -> None:
    """The cancelled items' requests were closed, not left hanging."""
    stats = await sim.wait_until(lambda s: s.in_flight == 0 and s.disconnects >= SLOW)
    assert stats.disconnects >= SLOW


# -- progress in a kernel without ipywidgets ---------------------------------------------

NO_WIDGETS = """
import sys
sys.modules["ipywidgets"] = None  # as if it were not installed
import raygent
from raygent._batch.progress import has_widgets
assert not has_widgets()


async def flaky(n: int) -> int:
    if n == 3:
        raise ValueError("three")
    return n

result = await raygent.batch(flaky, range(5), retry=raygent.Retry(attempts=1))
print(result.report.succeeded, result.report.failed)
"""


@backend_param()
async def test_without_ipywidgets_the_kernel_shows_a_text_bar_with_live_counts(
    kernel: Kernel,
) -> None:
    # On Ray the cell imports Ray, which in a kernel without ipywidgets imports tqdm.auto
    # ("IProgress not found") and logs at INFO that its reprs miss ipywidgets: neither
    # shows (issue 44.4), as in a script.
    cell = new_code_cell(NO_WIDGETS)
    kernel.nb.cells.append(cell)
    await kernel.client.async_execute_cell(cell, len(kernel.nb.cells) - 1)
    assert stdout(cell).split() == ["4", "1"]
    err = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert lines and all(line.startswith("batch: ") for line in lines), err  # the bar only
    last = lines[-1]
    assert "5/5" in last and "item/s" in last and "failed=1" in last and "retrying=0" in last
    assert not any(o.output_type in ("error", "display_data") for o in cell.outputs)


# -- raygent.init() re-run, and after a kernel restart ------------------------------------

INIT_CELL = """
import raygent
from raygent.sim import Rule, Reply, Match
from raygent.stores import SQLiteStore

backend = raygent.init(namespace={namespace!r})

@raygent.tool
def double(n: int) -> int:
    \"\"\"Twice n.\"\"\"
    return 2 * n

model = raygent.OpenAIModel("sim-gpt", base_url={url!r}, api_key="sk-sim")
memory = raygent.Memory(store=SQLiteStore({db!r}))
bot = raygent.agent(model=model, tools=[double], memory=memory)
assert bot.execute_sync("double 2").ok
assert bot.session("s").execute_sync("hello").ok
assert raygent.batch_sync(bot, ["double 3", "hi"], progress=False).ok
import ray
print(ray.get_runtime_context().gcs_address, len(ray.nodes()))
"""

INIT_SCRIPT = [
    Rule(
        match=Match(last_user="double", after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("double", {"n": 2})]),
    ),
    Rule(match=Match(), reply=Reply(text="ok")),
]


def named_actors(namespace: str) -> list[str]:
    import ray

    return sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == namespace
    )


def runners(names: list[str]) -> list[str]:
    return [name for name in names if name.startswith("raygent-runner-")]


@pytest.mark.parametrize("backend", ["ray"])
async def test_init_rerun_and_kernel_restart_leak_no_ray_and_no_actors(
    kernel: Kernel, tmp_path: Path
) -> None:
    import ray

    namespace = f"raygent-nb-{uuid.uuid4().hex[:8]}"
    gcs = ray.get_runtime_context().gcs_address
    nodes = len(ray.nodes())
    with serve(INIT_SCRIPT) as sim:
        source = INIT_CELL.format(
            namespace=namespace, url=sim.openai_base_url, db=str(tmp_path / "s.db")
        )
        first = await kernel.run(source)
        assert stdout(first).split() == [gcs, str(nodes)]  # joined the suite's Ray
        actors = named_actors(namespace)
        assert runners(actors), actors  # the batch ran on runners: there is something to leak
        again = await kernel.run(source)  # the cell re-run
        assert stdout(again).split() == [gcs, str(nodes)]
        assert named_actors(namespace) == actors

        await kernel.restart()
        await until(lambda: not runners(named_actors(namespace)), "the old kernel's runners ended")
        restarted = await kernel.run(source)
        assert stdout(restarted).split() == [gcs, str(nodes)]
        after = named_actors(namespace)
        assert len(after) == len(actors), (actors, after)
        assert [n for n in after if n not in runners(after)] == [
            n for n in actors if n not in runners(actors)
        ]
