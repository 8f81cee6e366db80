"""Helpers for the session-host tests: a Ray backend whose sessions go through hosts,
stores on SQLite files and the real Redis, a model that works in tool turns, a runner
actor (another process, hence another per-process lock), and checks on stored history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ray
import redis

import raygent
from raygent import Memory, Message
from raygent.actors import RayOptions, ray_backend
from raygent.actors.sessions.persistence import RaySessions
from raygent.memory import SavePolicy
from raygent.seams.contract import Backend
from raygent.stores import RedisStore, SQLiteStore, Store, StoredMessage
from raygent.testing import FunctionModel, call, reply

NAMESPACE = "raygent-tests"  # the namespace of the session's ray.init


def sessions_backend(namespace: str = NAMESPACE, **kwargs: Any) -> tuple[Backend, RaySessions]:
    """A Ray backend whose session persistence is `RaySessions(**kwargs)` (a namespace of
    its own gives a test hosts of its own, with its own bounds)."""
    sessions = RaySessions(RayOptions(namespace=namespace), **kwargs)
    backend = dataclasses.replace(ray_backend(RayOptions(namespace=namespace)), sessions=sessions)
    return backend, sessions


class InProcess:
    """An actor handle's shape over a plain object, in this process: `handle.m.remote(*a)`
    runs `obj.m(*a)` as a task (a `HostLease` can then be driven against a `SessionHost`
    without Ray). `calls` counts them by method."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.calls: dict[str, int] = defaultdict(int)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        calls = self.calls

        def remote(*args: Any) -> Any:
            calls[name] += 1
            return asyncio.ensure_future(method(*args))

        return SimpleNamespace(remote=remote)


def fresh_namespace() -> str:
    return f"raygent-tests-{uuid.uuid4().hex[:8]}"


def make_store(kind: str, tmp_path: Path, redis_url: str | None) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "sessions.db")
    assert redis_url is not None
    return RedisStore(redis_url, prefix=f"raygent-test-{uuid.uuid4().hex[:12]}")


def delete_store(store: Store) -> None:
    if isinstance(store, RedisStore):
        client = redis.Redis.from_url(store.url)
        try:
            keys = list(client.scan_iter(match=f"{store.prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i : i + 500])
        finally:
            client.close()


@raygent.tool(inline=True)
def note(text: str) -> str:
    """Write a note (runs in the caller's process)."""
    return f"noted {text}"


async def tool_turn_then_answer(messages: list[Message], options: Any) -> Any:
    """One tool turn, then the answer; the short sleeps give other runs every chance to
    interleave if nothing kept them apart."""
    await asyncio.sleep(0.005)
    last = messages[-1]
    if last.role == "user":
        return reply("noting", tool_calls=[call("note", {"text": last.text})])
    return f"answer after {len(messages)} messages"


def tool_agent(backend: Backend, store: Store, policy: SavePolicy = "message") -> raygent.Agent:
    return raygent.agent(
        model=FunctionModel(tool_turn_then_answer),
        tools=[note],
        backend=backend,
        memory=Memory(store, policy),
    )


@ray.remote(num_cpus=0)
class SessionDriver:
    """Another process that runs an agent in one session many times at once."""

    async def run(self, agent: raygent.Agent, session_id: str, prompts: Sequence[str]) -> list[Any]:
        session = agent.session(session_id)
        results = await asyncio.gather(*(session.execute(p) for p in prompts))
        return [(r.report.status, None if r.error is None else r.error.code) for r in results]


def roles_and_turns(stored: Sequence[StoredMessage]) -> list[tuple[str, int]]:
    return [(m.message.role, m.turn) for m in stored]


def check_unforked(stored: Sequence[StoredMessage]) -> dict[str, list[int]]:
    """Positions 0..n-1, and each run's messages in one contiguous stretch; returns the
    positions of each run."""
    assert [m.position for m in stored] == list(range(len(stored)))
    runs: dict[str, list[int]] = defaultdict(list)
    for m in stored:
        runs[m.run_id].append(m.position)
    for run_id, positions in runs.items():
        assert positions == list(range(positions[0], positions[0] + len(positions))), run_id
    return dict(runs)
