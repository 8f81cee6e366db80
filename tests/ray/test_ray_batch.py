"""`raygent.batch` on the Ray backend: runner actors keep the attempts in flight, the
driver feeds them and records each item once, whatever happens to a runner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_support import NAMESPACE, backend, sim_model

import raygent
from raygent import AbortController
from raygent._batch import BatchItem, Retry, batch
from raygent.actors import RayOptions, ray_backend
from raygent.errors import RateLimitError
from raygent.sim import Latency, serve

pytestmark = pytest.mark.usefixtures("ray_session")

PREFIX = "raygent-runner-"


def runner_names() -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(PREFIX) and a["namespace"] == NAMESPACE
    ]


async def pid_of_work(item: int) -> dict[str, int]:
    await asyncio.sleep(0.02)  # the work: an I/O wait
    return {"item": item, "pid": os.getpid()}


async def test_an_agent_batch_runs_on_runners_within_the_provider_bound() -> None:
    async with serve(latency=Latency(fixed_ms=30)) as sim:
        bot = raygent.agent(model=sim_model(sim, max_concurrency=6), backend=backend())
        result = await batch(bot, [f"q{i}" for i in range(40)], concurrency=16, runners=2)
        stats = sim.stats()
    assert result.ok, [str(i.error) for i in result.items if not i.ok]
    assert [item.index for item in result.items] == list(range(40))
    assert all(isinstance(text, str) and text for text in result.data)
    assert result.usage.input_tokens > 0
    assert stats.requests == 40
    assert stats.peak_in_flight <= 6  # the gateway's bound, across both runners


def _once_both_runners_began(started: Path) -> Any:
    """`pid_of_work`, but each item first waits (bounded) until two processes have begun
    items: a runner kept warm by an earlier batch cannot take them all while the other
    one is still starting (a condition polled off the runner's loop, not a sleep)."""

    async def where(item: int) -> dict[str, int]:
        with started.open("a") as f:
            f.write(f"{os.getpid()}\n")

        def both_began() -> None:
            import time

            deadline = time.monotonic() + 30
            while len(set(started.read_text().split())) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)

        await asyncio.to_thread(both_began)
        return await pid_of_work(item)

    return where


async def test_items_run_in_runner_processes_and_come_back_in_order(tmp_path: Path) -> None:
    ray_back = backend()
    result = await batch(
        _on(ray_back, _once_both_runners_began(tmp_path / "first")),
        range(30),
        concurrency=6,
        runners=2,
    )
    assert result.ok
    assert [row["item"] for row in result.data] == list(range(30))
    pids = {row["pid"] for row in result.data}
    assert os.getpid() not in pids and len(pids) == 2
    assert len(runner_names()) >= 2
    # The runners stay up for the driver's next batch, which reuses them.
    again = await batch(
        _on(ray_back, _once_both_runners_began(tmp_path / "again")),
        range(10),
        concurrency=6,
        runners=2,
    )
    assert {row["pid"] for row in again.data} == pids


async def test_a_runner_killed_mid_batch_loses_no_item_and_records_none_twice(
    tmp_path: Path,
) -> None:
    sink = tmp_path / "out.jsonl"
    killed: list[int] = []

    def kill_one(item: BatchItem) -> None:
        if killed or item.index < 5 or not item.ok:
            return
        pid = item.data["pid"]  # the runner process that ran this item: kill it
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

    result = await batch(
        _on(backend(), pid_of_work),
        range(120),
        concurrency=8,
        runners=2,
        sink=sink,
        on_item=kill_one,
    )
    assert killed
    assert result.ok, result.report
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    keys = [row["key"] for row in rows]
    assert sorted(keys) == list(range(120))  # every item, once
    assert all(row["status"] == "completed" for row in rows)
    assert max(row["attempts"] for row in rows) >= 2  # the killed runner's items ran again


async def test_retries_happen_in_the_runner_and_count_every_attempt() -> None:
    marks = Path(os.environ.get("TMPDIR", "/tmp")) / f"raygent-flaky-{os.getpid()}"
    marks.mkdir(exist_ok=True)

    async def flaky(item: int) -> int:
        mark = marks / str(item)
        if not mark.exists():  # the first attempt of each item fails, retryably
            mark.touch()
            raise RateLimitError("slow down", retry_after=0)
        return item

    result = await batch(
        _on(backend(), flaky),
        range(10),
        concurrency=4,
        runners=2,
        retry=Retry(attempts=3, backoff="none", jitter=False),
    )
    assert result.ok and result.data == list(range(10))
    assert {item.attempts for item in result.items} == {2}
    assert result.report.retries == 10


async def test_a_signal_cancels_the_runners_work_and_the_sink_stays_consistent(
    tmp_path: Path,
) -> None:
    sink = tmp_path / "out.jsonl"
    controller = AbortController()

    async def slow(item: int) -> int:
        await asyncio.sleep(0.01 if item < 4 else 30)
        return item

    def stop_after_four(item: BatchItem) -> None:
        if item.ok and item.index == 3:
            controller.abort("enough")

    result = await asyncio.wait_for(
        batch(
            _on(backend(), slow),
            range(40),
            concurrency=8,
            runners=2,
            sink=sink,
            signal=controller.signal,
            on_item=stop_after_four,
        ),
        timeout=60,
    )
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    assert len({row["key"] for row in rows}) == len(rows)  # none twice
    assert result.report.cancelled > 0
    assert {row["status"] for row in rows} <= {"completed", "cancelled"}
    assert result.report.stopped is not None and "enough" in result.report.stopped.message


async def test_an_executable_that_cannot_load_on_the_runners_stops_the_batch() -> None:
    result = await asyncio.wait_for(
        batch(_on(backend(), _Unshippable()), (i for i in range(50)), concurrency=4, runners=1),
        timeout=60,
    )
    assert not result.ok
    stopped = result.report.stopped
    assert stopped is not None and stopped.why == "failed"
    assert stopped.message.startswith("the batch failed: batch runners cannot load")
    assert "this executable cannot run in a worker" in stopped.message
    assert result.report.succeeded == 0
    assert result.report.total < 50  # it stopped reading instead of failing everything


async def test_a_runner_that_dies_at_start_is_replaced() -> None:
    # Kill a fresh runner before the batch reaches it: the batch makes another.
    ray_back = backend()
    doomed = await batch(_on(ray_back, pid_of_work), range(4), concurrency=2, runners=1)
    assert doomed.ok
    os.kill(doomed.data[0]["pid"], signal.SIGKILL)
    result = await batch(_on(ray_back, pid_of_work), range(20), concurrency=4, runners=1)
    assert result.ok, result.report
    assert doomed.data[0]["pid"] not in {row["pid"] for row in result.data}


class _Unshippable:
    """Pickles here, fails to unpickle in the runner."""

    async def __call__(self, item: Any) -> Any:
        return item

    def __reduce__(self) -> tuple[Any, ...]:
        return (_refuse, ())


def _refuse() -> Any:
    raise RuntimeError("this executable cannot run in a worker")


class _on:  # reads as a call: _on(backend, fn)
    """A plain async callable bound to a backend (as an agent would be), so the test
    needs no process-wide `raygent.init`."""

    def __init__(self, backend: Any, fn: Any) -> None:
        self.backend = backend
        self.fn = fn

    async def __call__(self, item: Any) -> Any:
        return await self.fn(item)


# Ray Data's own DataContext warns about its own deprecated field when copied.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
async def test_a_ray_dataset_is_streamed_through_the_runners() -> None:
    import ray.data

    rows = [{"id": f"k{i}", "input": i} for i in range(25)]
    dataset = ray.data.from_items(rows)

    async def double(row: dict[str, Any]) -> int:
        return int(row["input"]) * 2

    result = await batch(_on(backend(), double), dataset, concurrency=4, runners=2)
    assert result.ok
    assert sorted(result.data) == [i * 2 for i in range(25)]
    assert sorted(item.key for item in result.items) == sorted(row["id"] for row in rows)


async def test_an_executable_that_cannot_be_shipped_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    import threading

    lock = threading.Lock()  # cannot be pickled

    async def holds_a_lock(item: int) -> int:
        with lock:
            return item

    sink = tmp_path / "out.jsonl"
    with pytest.raises(TypeError, match="runners=0"):
        await batch(_on(backend(), holds_a_lock), range(3), sink=sink)
    assert not sink.exists()
    # The same batch runs in the driver when asked to.
    result = await batch(_on(backend(), holds_a_lock), range(3), runners=0)
    assert result.ok and result.data == [0, 1, 2]


async def test_observers_registered_in_the_driver_see_the_runs_made_on_runners() -> None:
    from raygent import observers
    from raygent.testing import FunctionModel, reply

    seen: list[str] = []
    bot = raygent.agent(
        "echo", model=FunctionModel(lambda messages, options: reply("ok")), backend=backend()
    )
    with observers.add(lambda report: seen.append(report.run_id)):
        # The driver's observe-all switch decides for the runners' runs too.
        unasked = await batch(bot, ["x"], runners=1)
        asked = await batch(bot, ["y"], runners=1, run_options={"observe": True})
        assert unasked.ok and asked.ok
        assert seen == [asked.items[0].result.report.run_id]
        seen.clear()
        with observers.observe_all(True):
            result = await batch(bot, ["a", "b", "c"], concurrency=2, runners=1)
            quiet = await batch(bot, ["d"], runners=1, run_options={"observe": False})
            # An agent with observe=False keeps global observers out even when its runs
            # name an observer of their own (the same rule as in-process).
            private = raygent.agent(
                "private",
                model=FunctionModel(lambda messages, options: reply("ok")),
                backend=backend(),
                observe=False,
            )
            own = await batch(private, ["e"], runners=1, run_options={"observe": _keep_nothing})
    assert result.ok and quiet.ok and own.ok
    assert sorted(seen) == sorted(item.result.report.run_id for item in result.items)


def _keep_nothing(report: Any) -> None:
    """An observer of a run's own (it runs in the runner)."""


async def test_eval_runs_the_cases_on_runners_and_scores_in_the_driver() -> None:
    from raygent.testing import FunctionModel, reply

    scored_in: list[int] = []

    def here(text: str) -> bool:
        scored_in.append(os.getpid())
        return text.startswith("echo:")

    bot = raygent.agent(
        model=FunctionModel(lambda messages, options: reply(f"echo:{messages[-1].text}")),
        backend=backend(),
    )
    report = await bot.eval(
        [{"input": "a", "expected": "echo:a"}, {"input": "b", "expected": "echo:x"}],
        scorers=[raygent.eval.exact(), raygent.eval.predicate(here)],
        runners=1,
    )
    assert [case.passed for case in report.cases] == [True, False]
    assert set(scored_in) == {os.getpid()}


class _UnreadableInDriver:
    """Pickles in the runner; fails to unpickle in the driver."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unreadable, ())


def _unreadable() -> Any:
    raise RuntimeError("this result cannot be read here")


async def unreadable_first(item: int) -> Any:
    await asyncio.sleep(0.05)  # the work; also keeps items in separate result batches
    return _UnreadableInDriver() if item == 0 else item


async def test_a_result_the_driver_cannot_read_fails_its_item_typed() -> None:
    result = await asyncio.wait_for(
        batch(_on(backend(), unreadable_first), range(5), concurrency=1, runners=1),
        timeout=90,
    )
    first, *rest = result.items
    assert first.status == "failed" and type(first.error).__name__ == "UnsentResultError"
    assert "cannot read its result" in str(first.error)
    assert [item.data for item in rest] == [1, 2, 3, 4]
    assert {item.attempts for item in result.items} == {1}  # no runner was taken for lost


async def lock_for_first(item: int) -> Any:
    import threading

    await asyncio.sleep(0.05)
    return threading.Lock() if item == 0 else item


async def test_a_result_that_cannot_be_pickled_in_the_runner_fails_its_item_alone() -> None:
    result = await batch(_on(backend(), lock_for_first), range(4), concurrency=2, runners=1)
    first, *rest = result.items
    assert first.status == "failed" and "could not be sent back" in str(first.error)
    assert [item.data for item in rest] == [1, 2, 3]


async def assigned(item: int) -> dict[str, float]:
    return dict(ray.get_runtime_context().get_assigned_resources())


async def test_runners_reserve_the_cpus_the_options_ask_for() -> None:
    result = await batch(_on(backend(runner_num_cpus=0.5), assigned), range(2), runners=1)
    assert result.ok and all(row.get("CPU") == 0.5 for row in result.data)
    default = await batch(_on(backend(), assigned), range(2), runners=1)
    assert default.ok and all(not row.get("CPU") for row in default.data)


async def test_an_agent_whose_sessions_live_in_this_process_is_kept_off_runners(
    tmp_path: Path,
) -> None:
    from raygent.stores import InMemoryStore, SQLiteStore
    from raygent.testing import FunctionModel, reply

    def count(messages: Any, options: Any) -> Any:
        return reply(f"seen {len(messages)}")

    rows = [{"input": "a", "session_id": "s"}, {"input": "b", "session_id": "s"}]
    in_memory = raygent.agent(
        model=FunctionModel(count), memory=raygent.Memory(InMemoryStore()), backend=backend()
    )
    with pytest.raises(TypeError, match="runners=0"):
        await batch(in_memory, rows)
    here = await batch(in_memory, rows, runners=0, concurrency=1)
    assert here.data == ["seen 1", "seen 3"]
    # A store every process reaches: the runners share the session through the hosts.
    on_file = raygent.agent(
        model=FunctionModel(count),
        memory=raygent.Memory(SQLiteStore(tmp_path / "s.db")),
        backend=backend(),
    )
    shared = await batch(on_file, rows, runners=1, concurrency=1)
    assert shared.data == ["seen 1", "seen 3"]


def fails_odd_once(marks: Path) -> Any:
    async def work(item: int) -> int:
        mark = marks / str(item)
        if item % 2 and not mark.exists():  # marks: files every process sees
            mark.touch()
            raise ValueError("odd, the first time")
        return item

    return work


async def test_resume_on_ray_reruns_only_what_did_not_complete(tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    work = fails_odd_once(tmp_path)
    first = await batch(_on(backend(), work), range(10), runners=2, sink=sink, retry=Retry(1))
    assert first.report.succeeded == 5 and first.report.failed == 5
    again = await batch(_on(backend(), work), range(10), runners=2, sink=sink, resume=True)
    assert again.ok and again.report.skipped == 5 and again.report.succeeded == 5
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    completed = sorted(r["key"] for r in rows if r["status"] == "completed")
    assert completed == list(range(10))  # each item completed once in the sink


# -- sessions: routed to runners, in order, no host on the way ---------------------------


class SessionModel:
    """A model for session items: it answers with the process it ran in and the length
    of the history it saw, and fails the first attempt of the questions in `flaky` (a
    retryable provider error; marks are files, so every runner sees them)."""

    def __init__(self, marks: Path, flaky: set[str], delay: float = 0.005) -> None:
        self.marks, self.flaky, self.delay = marks, flaky, delay

    async def __call__(self, messages: list[Any], options: Any) -> str:
        from raygent.errors import ServerError

        question = messages[-1].text
        await asyncio.sleep(self.delay)
        mark = self.marks / question.replace(":", "-")
        if question in self.flaky and not mark.exists():
            mark.touch()
            raise ServerError("try again", provider="test", status=503)
        return f"{question} in {os.getpid()} after {len(messages)}"


def _session_rows(sessions: int, per_session: int) -> list[dict[str, str]]:
    return [
        {"input": f"s{s}:{i}", "session_id": f"traveller-{s}"}
        for i in range(per_session)
        for s in range(sessions)
    ]


def _session_agent(tmp_path: Path, model: SessionModel, namespace: str) -> raygent.Agent:
    from raygent.stores import SQLiteStore
    from raygent.testing import FunctionModel

    return raygent.agent(
        model=FunctionModel(model),
        memory=raygent.Memory(SQLiteStore(tmp_path / "sessions.db"), "turn"),
        backend=ray_backend(RayOptions(namespace=namespace)),
    )


async def _check_sessions(tmp_path: Path, sessions: int, per_session: int) -> None:
    """Every session's stored history: its items in input order, each once, answered
    after seeing all that came before it (an item whose runner died after it was stored,
    before its result reached the driver, goes on from what it stored: not twice)."""
    from raygent.stores import Scope, SQLiteStore

    store = SQLiteStore(tmp_path / "sessions.db")
    for s in range(sessions):
        history = await store.load(Scope(f"traveller-{s}"))
        asked = [m.text for m in history[::2]]
        answers = [m.text.split() for m in history[1::2]]
        assert [a[0] for a in answers] == asked  # each question answered, in turn
        assert [int(a[-1]) for a in answers] == [2 * i + 1 for i in range(len(asked))]
        assert asked == [f"s{s}:{i}" for i in range(per_session)]
    await store.aclose()


async def test_a_sessions_items_run_in_order_on_one_runner_with_no_host_call(
    tmp_path: Path,
) -> None:
    namespace = f"raygent-tests-routed-{os.getpid()}"
    model = SessionModel(tmp_path, flaky={"s0:0", "s3:2"})
    agent = _session_agent(tmp_path, model, namespace)
    rows = _session_rows(6, 5)
    result = await batch(agent, rows, concurrency=8, runners=2, retry=Retry(3, backoff="none"))
    assert result.ok, [str(i.error) for i in result.items if not i.ok]
    assert result.report.retries == 2  # each retried before its session's next item
    await _check_sessions(tmp_path, 6, 5)
    by_session: dict[str, set[str]] = {}
    for row, text in zip(rows, result.data, strict=True):
        by_session.setdefault(row["session_id"], set()).add(text.split()[2])
    assert all(len(pids) == 1 for pids in by_session.values())  # one runner per session
    assert len(set().union(*by_session.values())) == 2  # and both runners had some
    hosts = [
        a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace
    ]
    assert not [a for a in hosts if a["name"].startswith("raygent-sessions-")]  # no host hop


async def test_a_killed_runners_sessions_move_with_its_items_in_order(tmp_path: Path) -> None:
    namespace = f"raygent-tests-moved-{os.getpid()}"
    model = SessionModel(tmp_path, flaky=set(), delay=0.02)
    agent = _session_agent(tmp_path, model, namespace)
    killed: list[int] = []

    def kill_one(item: BatchItem) -> None:
        if killed or item.index < 6 or not item.ok:
            return
        pid = int(item.data.split()[2])  # the runner that answered: kill it mid-batch
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

    sink = tmp_path / "out.jsonl"
    result = await batch(
        agent, _session_rows(4, 8), concurrency=8, runners=2, sink=sink, on_item=kill_one
    )
    assert killed and result.ok, result.report
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(32))  # every item once
    await _check_sessions(tmp_path, 4, 8)  # every session whole, in order, each item once


def _module_sent_by_value() -> Any:
    """A module the workers cannot import (made here, at run time), sent by value: like
    a notebook's or a script's `__main__`, with a pydantic output model."""
    import sys
    import types

    module = types.ModuleType("raygent_by_value_outputs")
    code = """
from pydantic import BaseModel

class Answer(BaseModel):
    item: int

async def answer(item):
    return Answer(item=item)
"""
    exec(compile(code, module.__name__, "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return module


async def test_an_output_class_sent_by_value_comes_back_as_the_drivers_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray.cloudpickle.cloudpickle as cloudpickle

    module = _module_sent_by_value()
    rebuilt: list[str] = []
    make = cloudpickle._make_skeleton_class

    def counted(*args: Any) -> Any:  # what unpickling a class sent by value does here
        rebuilt.append(args[1])
        return make(*args)

    monkeypatch.setattr(cloudpickle, "_make_skeleton_class", counted)
    result = await batch(_on(backend(), module.answer), range(40), concurrency=8, runners=1)
    assert result.ok
    assert all(type(data) is module.Answer for data in result.data)  # the driver's class
    assert [data.item for data in result.data] == list(range(40))
    assert rebuilt == []  # no class rebuilt for each item that came back


@raygent.tool
def which_actor() -> str:
    """The Ray actor this call runs in (empty: not an actor)."""
    return ray.get_runtime_context().get_actor_name() or ""


def _answers_with_the_tool() -> Any:
    from raygent.messages import ToolMessage
    from raygent.testing import FunctionModel, call, reply

    def step(messages: list[Any], options: Any) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return messages[-1].text
        return reply(tool_calls=[call("which_actor", {})])

    return FunctionModel(step)


@pytest.mark.parametrize("in_runners", [True, False])
async def test_a_batch_runs_unplaced_tools_in_its_runners_unless_told_otherwise(
    in_runners: bool,
) -> None:
    options = RayOptions(namespace=NAMESPACE, tools_in_runners=in_runners)
    bot = raygent.agent(
        model=_answers_with_the_tool(), tools=[which_actor], backend=ray_backend(options)
    )
    result = await batch(bot, [f"q{i}" for i in range(12)], concurrency=4, runners=1)
    assert result.ok, [str(i.error) for i in result.items if not i.ok]
    where = {text.split("-")[1] for text in result.data}  # raygent-runner-... / -tools-...
    assert where == ({"runner"} if in_runners else {"tools"})
    # From the driver, the same agent's tool goes to this node's executors either way.
    here = await bot.execute("from the driver")
    assert here.ok and here.text.startswith("raygent-tools-")


async def test_runners_started_ahead_are_the_ones_the_next_batch_uses() -> None:
    namespace = f"raygent-tests-ahead-{os.getpid()}"
    ahead = ray_backend(RayOptions(namespace=namespace))
    assert ahead.batches is not None
    await ahead.batches.start(16, runners=2)  # up and answering when this returns
    actors = ray.util.list_named_actors(all_namespaces=True)
    started = [a for a in actors if a["namespace"] == namespace and a["name"].startswith(PREFIX)]
    assert len(started) == 2
    result = await batch(_on(ahead, pid_of_work), range(20), concurrency=16, runners=2)
    assert result.ok
    again = ray.util.list_named_actors(all_namespaces=True)
    assert len([a for a in again if a["namespace"] == namespace]) == 2  # no new runner


async def test_a_batch_on_runners_leaves_the_session_hosts_no_stale_copy(tmp_path: Path) -> None:
    from raygent.stores import SQLiteStore
    from raygent.testing import FunctionModel

    namespace = f"raygent-tests-stale-{os.getpid()}"
    backend_ = ray_backend(RayOptions(namespace=namespace))
    bot = raygent.agent(
        model=FunctionModel(lambda messages, options: f"seen {len(messages)}"),
        memory=raygent.Memory(SQLiteStore(tmp_path / "s.db"), "turn"),
        backend=backend_,
    )
    session = bot.session("shared")
    assert (await session.execute("through a host")).text == "seen 1"  # the host caches it
    rows = [{"input": f"batch {i}", "session_id": "shared"} for i in range(3)]
    result = await batch(bot, rows, concurrency=2, runners=1)  # written around the host
    assert result.data == ["seen 3", "seen 5", "seen 7"]
    # The host was told to drop its copy: this run sees everything, and its write lines up.
    again = await session.execute("through the host again")
    assert again.ok and again.text == "seen 9", again.error
