"""Test-session setup shared by every test.

- RAYGENT_OFFLINE=1: an adapter aimed at anything but loopback fails loudly (OfflineError)
  before any I/O, so no test can reach a real provider by accident.
- `redis_url`: the real Redis on 127.0.0.1:6379. Missing Redis skips locally but fails
  under CI=true.
- `ray_session`: one Ray instance for the whole session (tests/ray use it).
- `@pytest.mark.slow(reason)`: a bare `pytest` (the default suite, its test paths) leaves
  these tests out; `pytest -m slow` runs them alone, and naming a test's file or folder
  runs it too. CI (the README's test command) runs both: every test, every time.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["RAYGENT_OFFLINE"] = "1"
# Ray is raygent's default backend; tests run in-process unless they ask for Ray
# (backend=... or the ray_session fixture), so no test starts Ray by accident.
os.environ.setdefault("RAYGENT_BACKEND", "local")
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_key, None)

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


def _redis_answers() -> bool:
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A bare `pytest` (no `-m`, no paths: the configured test paths) leaves out the tests
    marked `slow`; the README's test command then runs them with `-m slow`."""
    if config.option.markexpr or config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@pytest.fixture(scope="session")
def redis_url() -> str:
    if not _redis_answers():
        message = f"no Redis answers on {REDIS_HOST}:{REDIS_PORT}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: a missing Redis is a failure)")
        pytest.skip(message)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/15"


# Ray starts once per test session (ray.init takes 3-5 s here). Its workers get the test
# folders on their path, so that what tests define (tools, output types, actors) can be
# unpickled there. A custom resource lets tests check that tool tasks ask for resources.
RAY_TEST_RESOURCE = "raygent_test_slot"


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    tests = Path(__file__).resolve().parent
    folders = sorted({str(path.parent) for path in tests.rglob("test_*.py")} | {str(tests)})
    ray.init(
        num_cpus=4,
        resources={RAY_TEST_RESOURCE: 4},
        include_dashboard=False,
        namespace="raygent-tests",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(folders)}},
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[str]:
    """moto's server (S3 for Bedrock's batch jobs, in the simulator's tests and the
    provider-batch ones), started once per session: its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
