"""A store that can never open is a permanent failure; one that is down, a transient one.

A job checks its stores before its first request (`JobCheckError`); these tests turn that
check off (`check=False`) to see what each item meets when a store fails mid-job."""

from __future__ import annotations

from pathlib import Path

import pytest

import raygent
from raygent._batch import batch
from raygent.errors import JobCheckError
from raygent.stores import RedisStore, SQLiteStore
from raygent.testing import FunctionModel


def answering_agent(store: object) -> raygent.Agent:
    model = FunctionModel(lambda messages, options: "ok")
    return raygent.agent(model=model, memory=raygent.Memory(store=store))  # type: ignore[arg-type]


async def test_a_sqlite_file_in_a_missing_folder_fails_each_item_once(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "no" / "such" / "folder" / "sessions.db"))
    items = [{"input": f"q{i}", "session_id": f"s{i}"} for i in range(3)]
    with pytest.raises(JobCheckError, match="does not exist"):
        await batch(answering_agent(store), items)
    result = await batch(answering_agent(store), items, check=False)
    for item in result.items:
        assert item.status == "failed" and item.attempts == 1  # not tried again
        assert item.error is not None and item.error.code == "STORE_UNAVAILABLE"
        assert not item.error.retryable and "does not exist" in str(item.error)


async def test_a_redis_that_is_down_is_retried() -> None:
    store = RedisStore("redis://127.0.0.1:1/0")  # nothing listens on port 1
    result = await batch(
        answering_agent(store),
        [{"input": "q", "session_id": "s"}],
        retry=raygent.Retry(attempts=2, backoff="none"),
        check=False,
    )
    item = result.items[0]
    assert item.error is not None and item.error.code == "STORE_UNAVAILABLE"
    assert item.error.retryable and item.attempts == 2
