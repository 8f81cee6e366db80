"""Durable supervisors: each settled iteration is written; a run that failed (or died)
resumes from the next iteration, the settled ones not run again; drift is refused; a
completed run gives its result again; a durable batch's retry continues the item's run."""

from __future__ import annotations

from typing import Any

import raygent
from raygent.errors import DriftError, RaygentError, StepFailedError
from raygent.stores import InMemoryStore, SQLiteStore


def _intent(name: str, calls: list[str], fail_first: bool = False) -> raygent.Workflow:
    """An intent (a one-step workflow) that records each call; `fail_first`: its first
    call fails (a flaky dependency)."""

    def work(state: raygent.WorkflowState) -> str:
        calls.append(name)
        if fail_first and calls.count(name) == 1:
            raise RaygentError(f"{name} is down", retryable=True)
        return f"{name} on {state.input}"

    return raygent.workflow(name=name, steps=[raygent.step("work", run=work)])


def _desk(calls: list[str], durable: Any, **kwargs: Any) -> raygent.Supervisor:
    plan = {1: "research", 2: "write"}
    return raygent.supervisor(
        name="desk",
        intents={
            "research": _intent("research", calls),
            "write": _intent("write", calls, fail_first=True),
            **kwargs.pop("extra", {}),
        },
        route=lambda s: plan.get(s.iteration, raygent.END),
        durable=durable,
        **kwargs,
    )


async def test_a_failed_supervisor_resumes_from_the_iteration_that_did_not_settle(
    tmp_path: Any,
) -> None:
    store = SQLiteStore(tmp_path / "flows.db")
    try:
        calls: list[str] = []
        durable = raygent.Durable(store=store, delete_on_complete=False)
        failed = await _desk(calls, durable).execute("tides", run_id="desk-1")
        assert isinstance(failed.error, StepFailedError)
        assert failed.outputs == {"research": "research on tides"}
        assert calls == ["research", "write"]

        # Another process, the same supervisor on the same store.
        resumed = await _desk(calls, durable).resume("desk-1")

        assert resumed.ok, resumed.error
        assert calls == ["research", "write", "write"]  # research is not run again
        assert resumed.data == "write on tides"
        assert resumed.outputs == {"research": "research on tides", "write": "write on tides"}
        assert resumed.report.resumed_from_step == "iteration 2"
        kinds = [(s.kind, s.iteration) for s in resumed.report.steps]
        assert kinds == [("route", 1), ("intent", 1), ("route", 2), ("intent", 2), ("route", 3)]
        assert resumed.report.resumes[-1].settled_steps == 2

        again = await _desk(calls, durable).resume("desk-1")
        assert again.ok and again.data == resumed.data
        assert again.report.resumes[-1].already_resolved
        assert len(calls) == 3
    finally:
        await store.aclose()


async def test_a_changed_supervisor_is_refused_until_forced() -> None:
    calls: list[str] = []
    durable = raygent.Durable(store=InMemoryStore())
    assert not (await _desk(calls, durable).execute("tides", run_id="desk-2")).ok

    changed = _desk(calls, durable, extra={"review": _intent("review", calls)})
    refused = await changed.resume("desk-2")
    assert isinstance(refused.error, DriftError)
    assert refused.error.changed == ["intents"]
    assert calls == ["research", "write"]  # nothing ran

    bumped = _desk(calls, durable, max_iterations=5)
    assert isinstance((await bumped.resume("desk-2")).error, DriftError)
    forced = await bumped.resume("desk-2", force=True)
    assert forced.ok and forced.report.resumes[-1].drift == ["max_iterations"]
    assert calls == ["research", "write", "write"]


async def test_a_durable_batch_retry_continues_each_supervisor_run() -> None:
    calls: list[str] = []
    result = await raygent.batch(
        _desk(calls, None),
        [f"topic {i}" for i in range(5)],
        durable=raygent.Durable(store=InMemoryStore()),
        retry=raygent.Retry(attempts=2, backoff="none"),
        progress=False,
        runners=0,
    )
    assert [item.status for item in result.items] == ["completed"] * 5
    assert result.data == [f"write on topic {i}" for i in range(5)]
    # The first write of all fails (a flaky dependency): that item's retry resumes its
    # run after the research, which ran once for every item.
    assert sorted(item.attempts for item in result.items) == [1, 1, 1, 1, 2]
    assert calls.count("research") == 5 and calls.count("write") == 6
    retried = next(item for item in result.items if item.attempts == 2)
    assert retried.result.report.resumed_from_step == "iteration 2"
