"""Where a job writes, checked before anything is written: a round trip through each
store its runs would use (a probe written, read back and removed; a cache is read only),
and its sink's place (the folder can be written; nothing is created)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...messages import UserMessage
from ...seams.planned import StoreUse
from ...stores import CacheStore, RunStore, Scope, Store
from ..sink_job import SinkJob
from .problems import Problem

__all__ = ["PROBE_SECONDS", "sink_problems", "store_problems"]

PROBE_SECONDS = 10.0  # a store that has not answered a round trip by then is not there
_NAMESPACE = "raygent-preflight"
_USES: dict[StoreUse, str] = {
    "memory": "the agent's memory",
    "durable": "durable runs",
    "cache": "the response cache",
}


async def store_problems(stores: Sequence[tuple[StoreUse, Any]]) -> list[Problem]:
    """A problem for each store (each once, with all it is used for) that a round trip
    through the protocols it is used by does not come back from."""
    uses_of: dict[int, set[StoreUse]] = {}
    unique: list[Any] = []
    for use, store in stores:
        if id(store) not in uses_of:
            uses_of[id(store)] = set()
            unique.append(store)
        uses_of[id(store)].add(use)
    found = await asyncio.gather(*(_round_trip(s, uses_of[id(s)]) for s in unique))
    return [problem for problem in found if problem is not None]


async def _round_trip(store: Any, uses: set[StoreUse]) -> Problem | None:
    named = ", ".join(_USES[use] for use in _USES if use in uses)
    where = f"{named} ({type(store).__name__})"
    try:
        await asyncio.wait_for(_probe(store, uses), PROBE_SECONDS)
    except TimeoutError:
        problem = f"no answer to a round trip within {PROBE_SECONDS:.0f} s"
    except Exception as exc:
        problem = f"a round trip failed: {type(exc).__name__}: {exc}"
    else:
        return None
    return Problem(where, problem, "start the store or fix its address and rights, or use another")


async def _probe(store: Any, uses: set[StoreUse]) -> None:
    """Write, read back and remove a probe under a name of its own, by each protocol the
    store is used by (conversations, durable runs; cached replies are only read)."""
    scope = Scope(session_id=f"{_NAMESPACE}-{uuid.uuid4().hex}")
    if isinstance(store, Store):
        await store.ensure()  # connects; creates or checks the schema
    if isinstance(store, Store) and "memory" in uses:
        await store.append(scope, "preflight", 0, [UserMessage(content="probe")])
        loaded = await store.load(scope)
        await store.clear(scope)
        if len(loaded) != 1:
            raise RuntimeError(f"a probe written was read back as {len(loaded)} messages")
    if isinstance(store, RunStore) and "durable" in uses:
        await store.start_run(scope, b"{}")
        record = await store.load_run(scope)
        await store.delete_run(scope)
        if record is None:
            raise RuntimeError("a durable run written was not read back")
    # A cache is only read: it keeps no delete, and a probe left behind would count as a
    # reply it holds (a cache that cannot write sends every trip as a miss anyway).
    cached = isinstance(store, CacheStore) and "cache" in uses
    if cached and await store.get_cached(_NAMESPACE, uuid.uuid4().hex) is not None:
        raise RuntimeError("a key never written was read back")


def sink_problems(sink: SinkJob) -> list[Problem]:
    """Whether the job can write its sink where it is (nothing is created here)."""
    path = sink.path
    where = f"sink {str(path)!r}"
    if path.exists():
        wanted_dir = sink.kind == "parquet"
        if wanted_dir and not path.is_dir() and not sink.resume and sink.mode != "overwrite":
            return []  # sink_job says what a Parquet file in the way means
        if not wanted_dir and path.is_dir():
            return [Problem(where, "a folder is in the way of the JSONL file", "name a file")]
        if not os.access(path, os.W_OK):
            return [Problem(where, "it cannot be written (permissions)", _FIX)]
        return []
    folder = _existing_ancestor(path.parent)
    if not folder.is_dir():
        return [Problem(where, f"{folder} is a file, not a folder", "name a sink in a folder")]
    if not os.access(folder, os.W_OK | os.X_OK):
        return [Problem(where, f"{folder} cannot be written (permissions, read-only)", _FIX)]
    return []


_FIX = "give a sink in a folder this process can write"


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(path.anchor or ".")
