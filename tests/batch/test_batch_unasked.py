"""Features a batch did not ask for cost nothing (issue 38.4): with no cache, no budget,
no provider batch, no sink and no progress bar, none of their code runs, on either
backend, in the driver or in a Ray runner.

Their entry points are made to raise for the length of the job: in this process (the
driver's side: the sink, the line pool, the budget's ledger, the bar) and, on Ray, in the
runner too, where the executable turns them on around each run it makes (a runner is
shared by the session's batches, so the trap is armed only inside this test's runs). A
run that reached any of them fails, and so would the test.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import raygent
from raygent.models import OpenAIModel
from raygent.seams.local import LOCAL
from raygent.sim import Latency, serve

ITEMS = 24
# (module, attribute): each a constructor or a function a feature runs per job or item.
UNASKED = [
    ("raygent._batch.provider.pool", "LinePool"),
    ("raygent._batch.provider.trip_lines", "ItemLines"),
    ("raygent._batch.provider.trip_lines", "RelayedLines"),
    ("raygent._batch.provider.trip_lines", "_LineSend"),
    ("raygent._batch.provider.log", "SubmissionLog"),
    ("raygent.seams.request_path", "BatchOrOnline"),
    ("raygent._batch.sinks", "JsonlSink"),
    ("raygent._batch.sinks", "ParquetSink"),
    ("raygent._batch.progress", "bar_class"),
    ("raygent.budgets.budget", "LocalBudgetLedger"),
    ("raygent.budgets.budget", "Account"),
    ("raygent.seams.budgeted", "BudgetedAccess"),
    ("raygent.seams.budgeted", "_Hold"),
    ("raygent.cache._cache", "CachedAccess"),
    ("raygent.cache._cache", "request_key"),
]
# In a runner: armed only inside a run of `TrappedAgent`.
_armed: contextvars.ContextVar[bool] = contextvars.ContextVar("unasked_armed", default=False)
_installed: list[bool] = []


class UnaskedFeatureRan(AssertionError):
    pass


def _trap(name: str, original: Any, always: bool) -> Any:
    def refuse() -> None:
        if always or _armed.get():
            raise UnaskedFeatureRan(f"{name} ran for a batch that did not ask for it")

    if isinstance(original, type):

        class Trapped(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                refuse()
                super().__init__(*args, **kwargs)

        Trapped.__name__ = original.__name__
        return Trapped

    @functools.wraps(original)
    def trapped(*args: Any, **kwargs: Any) -> Any:
        refuse()
        return original(*args, **kwargs)

    return trapped


def _install(always: bool) -> Callable[[], None]:
    """Trap every entry point in `UNASKED` (in every module that imported it by name)."""
    import importlib
    import sys

    undo: list[tuple[Any, str, Any]] = []

    def undo_all() -> None:
        for module, attr, original in reversed(undo):
            setattr(module, attr, original)

    try:
        for module_name, attr in UNASKED:
            module = importlib.import_module(module_name)
            original = getattr(module, attr)  # a renamed entry point fails here, loudly
            trapped = _trap(f"{module_name}.{attr}", original, always)
            for other in list(sys.modules.values()):
                if getattr(other, "__name__", "").startswith("raygent") and (
                    getattr(other, attr, None) is original
                ):
                    undo.append((other, attr, original))
                    setattr(other, attr, trapped)
    except BaseException:
        undo_all()  # never leave a trap behind for the tests that follow
        raise
    return undo_all


@contextmanager
def trapped_here() -> Iterator[None]:
    undo = _install(always=True)
    try:
        yield
    finally:
        undo()


class TrappedAgent(raygent.Agent):
    """An agent whose runs arm the traps in the process they run in (a Ray runner)."""

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        if not _installed:
            _installed.append(True)
            _install(always=False)
        token = _armed.set(True)
        try:
            return await super().execute(*args, **kwargs)
        finally:
            _armed.reset(token)


def _model(url: str) -> OpenAIModel:
    return OpenAIModel("sim-gpt", base_url=url, api_key="sk-test")


def test_the_traps_fire_when_a_feature_is_asked_for(tmp_path: Any) -> None:
    # The trap is real: a job with a sink and a budget reaches what it set.
    with serve(latency=Latency(fixed_ms=0)) as sim, trapped_here():
        agent = raygent.agent(model=_model(sim.openai_base_url), backend=LOCAL)
        with pytest.raises(UnaskedFeatureRan, match="JsonlSink"):
            raygent.batch_sync(agent, ["q"] * 2, sink=str(tmp_path / "out.jsonl"))
        with pytest.raises(UnaskedFeatureRan, match="LocalBudgetLedger"):
            raygent.batch_sync(agent, ["q"] * 2, budget=raygent.Budget(tokens=10_000))
        # ...and per run: a run's own budget reaches its ledger inside the run.
        result = raygent.batch_sync(
            agent, ["q"] * 2, progress=False, run_options={"budget": raygent.Budget(tokens=9)}
        )
        assert ["LocalBudgetLedger ran" in str(item.error) for item in result.items] == [True] * 2


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_plain_batch_runs_none_of_the_features_it_did_not_ask_for(
    backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_session")
        from backend_support import ray_test_backend

        on: Any = ray_test_backend()
    else:
        on = LOCAL
    with serve(latency=Latency(fixed_ms=0)) as sim, trapped_here():
        agent = raygent.agent(model=_model(sim.openai_base_url), backend=on)
        agent.__class__ = TrappedAgent
        result = raygent.batch_sync(agent, ["q"] * ITEMS, concurrency=8, progress=False)
        # The trap holds where the runs run (on Ray, in a runner): a run's budget trips it.
        budgeted = raygent.batch_sync(
            agent, ["q"] * 2, progress=False, run_options={"budget": raygent.Budget(tokens=9)}
        )
    assert [item.error for item in result.items if item.error is not None] == []
    assert ["LocalBudgetLedger ran" in str(item.error) for item in budgeted.items] == [True] * 2
    assert result.report.succeeded == ITEMS
