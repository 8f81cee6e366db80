"""Routing by deadline: the job-level tests run on both backends (`test_x[local]`,
`test_x[ray]`); the planner's tests run once, in-process.

On Ray, a job's first online request in a fresh cluster starts the model gateway and
the runners' connections (seconds): a test's deadline would pay for that, not for its
route. Ray's one-time start is paid here, once per session, before any test's clock
starts, as a cluster that has run jobs has paid it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backend_support import on_backend, parametrize

import raygent
from raygent.sim import serve

_warm = False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    for kind in on_backend(request):
        if kind == "ray":
            _warm_up()
        yield kind


def _warm_up() -> None:
    global _warm
    if _warm:
        return
    with serve() as sim:
        for settings in ({}, {"max_concurrency": 16}):
            model = raygent.OpenAIModel(
                "gpt-4o-mini", base_url=sim.openai_base_url, api_key="sk-test", **settings
            )
            raygent.batch_sync(raygent.agent(model=model), ["warm"] * 8, progress=False)
    _warm = True
