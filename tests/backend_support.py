"""Both backends for the scenario suites (tests/agent, tests/memory): each test there runs
once on the local backend and once on Ray (`test_x[local]`, `test_x[ray]`).

`on_backend(request)` makes the test's backend current for agents built without
`backend=` and restores the previous choice afterwards. The Ray backend is built once
per test session on the session's Ray (`ray_session`, started by the first Ray test),
in the tests' namespace, with the backend's default options.

`@pytest.mark.local_only(reason)` keeps a test to the local backend (its Ray half is not
generated, rather than skipped): only for tests about the in-process backend itself
(object identity across the tool boundary, threads of this process). A test about
behaviour runs on both.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygent
import raygent.seams.registry
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL

BACKENDS = ("local", "ray")
NAMESPACE = "raygent-tests"  # the namespace of the session's ray.init

_ray: Backend | None = None


def ray_test_backend() -> Backend:
    """The session's Ray backend (one, so each tool's remote function is exported once)."""
    global _ray
    if _ray is None:
        from raygent.actors import RayOptions, ray_backend

        _ray = ray_backend(RayOptions(namespace=NAMESPACE))
    return _ray


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Each suite's `pytest_generate_tests`: every test on both backends, a `local_only`
    one on the local backend alone (deselected on Ray, not skipped)."""
    if "backend_kind" in metafunc.fixturenames:
        local_only = metafunc.definition.get_closest_marker("local_only") is not None
        kinds = ["local"] if local_only else list(BACKENDS)
        metafunc.parametrize("backend_kind", kinds, indirect=True)


def on_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The body of each suite's autouse `backend_kind` fixture."""
    kind = str(request.param)
    if kind == "ray":
        request.getfixturevalue("ray_session")
    chosen = ray_test_backend() if kind == "ray" else LOCAL
    previous = raygent.seams.registry.use_backend(chosen)
    try:
        yield kind
    finally:
        raygent.seams.registry.use_backend(previous)


class Marks:
    """Marks that tools leave where a test sees them on either backend: lines in files of
    a folder (a tool on Ray runs in a worker process, where the test's lists and events
    are copies). Picklable: a tool that uses it can be shipped to a worker."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def add(self, name: str, text: str = "") -> None:
        """Append `text` as one line of `name` (safe from several processes at once)."""
        with open(self.folder / f"{name}.marks", "a") as file:
            file.write(text + "\n")

    def read(self, name: str) -> list[str]:
        path = self.folder / f"{name}.marks"
        return path.read_text().splitlines() if path.exists() else []

    def count(self, name: str) -> int:
        return len(self.read(name))

    async def wait(self, name: str, count: int = 1, timeout: float = 20.0) -> list[str]:
        """Wait (bounded) until `name` has `count` lines; for tests and async tools."""
        deadline = time.monotonic() + timeout
        while len(lines := self.read(name)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: {len(lines)} marks, not {count}")
            await asyncio.sleep(0.01)
        return lines


class Hanging:
    """A tool (`wait_forever`) that blocks until cancelled and leaves marks (in `folder`,
    else a temporary folder removed with this object) when it started and when it was
    cancelled (on Ray: its task cancelled)."""

    def __init__(self, folder: Path | None = None) -> None:
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="raygent-hanging-"))
            weakref.finalize(self, shutil.rmtree, folder, True)
        self.marks = marks = Marks(folder)

        @raygent.tool(name="wait_forever")
        async def wait_forever() -> str:
            """Never returns."""
            marks.add("started")
            try:
                await asyncio.get_running_loop().create_future()
            except (asyncio.CancelledError, KeyboardInterrupt):
                marks.add("cancelled")
                raise
            return "unreachable"

        self.tool = wait_forever

        self.started = _Mark(marks, "started")
        self.cancelled = _Mark(marks, "cancelled")

    async def was_cancelled(self) -> None:
        """Asserts that the tool saw its cancellation: on the local backend by the time
        its run ended (a run ends after its tools), on Ray soon after (the cancel reaches
        the worker process asynchronously)."""
        if raygent.current_backend().name == "local":
            assert self.cancelled.is_set(), "the run ended before its tool was cancelled"
        else:
            await self.cancelled.wait()


class _Mark:
    """One mark, used like an `asyncio.Event` that only the tool sets."""

    def __init__(self, marks: Marks, name: str) -> None:
        self.marks, self.name = marks, name

    def is_set(self) -> bool:
        return self.marks.count(self.name) > 0

    async def wait(self) -> None:
        await self.marks.wait(self.name)
