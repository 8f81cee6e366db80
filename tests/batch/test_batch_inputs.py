"""Every input format: list, generator, async iterable, JSONL, CSV, Parquet, a dataset."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from batch_support import shouting_agent, write_jsonl

from raygent._batch import InputError, batch

ROWS = [{"input": f"question {i}", "key": f"q{i}", "topic": "t"} for i in range(5)]
EXPECTED = [f"QUESTION {i}" for i in range(5)]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class FakeDataset:
    """Duck-types a Ray Dataset: rows come from `iter_rows()`."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.iterated = 0

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        for row in self.rows:
            self.iterated += 1
            yield row


async def test_a_list_a_generator_and_an_async_iterable() -> None:
    def rows() -> Iterator[dict[str, Any]]:
        yield from ROWS

    async def arows() -> AsyncIterator[dict[str, Any]]:
        for row in ROWS:
            yield row

    for items in (ROWS, rows(), arows()):
        result = await batch(shouting_agent(), items)
        assert result.data == EXPECTED, type(items)
        assert [i.key for i in result.items] == [r["key"] for r in ROWS]
        assert result.items[0].meta == {"key": "q0", "topic": "t"}


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "parquet-dir"])
async def test_files_are_read_row_by_row(tmp_path: Path, kind: str) -> None:
    if kind == "jsonl":
        path = write_jsonl(tmp_path / "in.jsonl", ROWS)
    elif kind == "csv":
        path = write_csv(tmp_path / "in.csv", ROWS)
    elif kind == "parquet":
        path = write_parquet(tmp_path / "in.parquet", ROWS)
    else:
        path = tmp_path / "parts"
        path.mkdir()
        write_parquet(path / "part-1.parquet", ROWS[:2])
        write_parquet(path / "part-2.parquet", ROWS[2:])
    result = await batch(shouting_agent(), path)
    assert result.ok and result.data == EXPECTED
    assert [i.key for i in result.items] == [r["key"] for r in ROWS]


async def test_a_dataset_with_iter_rows() -> None:
    dataset = FakeDataset(ROWS)
    result = await batch(shouting_agent(), dataset, concurrency=2)
    assert result.data == EXPECTED and dataset.iterated == len(ROWS)


async def test_a_plain_callable_gets_each_row_as_it_is(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2, "id": "two"}, 3])

    async def echo(row: Any) -> Any:
        return row

    result = await batch(echo, path)
    assert result.data == [{"n": 1}, {"n": 2, "id": "two"}, 3]
    assert [i.key for i in result.items] == [0, "two", 2]


async def test_a_line_that_is_not_json_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"input": "a"}\n{not json\n\n{"input": "b"}\n')
    result = await batch(shouting_agent(), path)
    assert result.data == ["A", None, "B"]
    bad = result.items[1]
    assert isinstance(bad.error, InputError) and "line 2" in str(bad.error)
    assert bad.attempts == 0 and result.report.stopped is None


async def test_an_agent_row_without_input_fails_with_a_clear_error() -> None:
    result = await batch(shouting_agent(), [{"question": "a"}])
    assert "needs an 'input' field" in str(result.items[0].error)


async def test_bad_inputs_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await batch(shouting_agent(), tmp_path / "missing.jsonl")
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(ValueError, match=r"must be \.jsonl"):
        await batch(shouting_agent(), tmp_path / "in.txt")
    with pytest.raises(TypeError):
        await batch(shouting_agent(), {"input": "a"})


async def test_an_item_session_id_runs_it_in_that_session() -> None:
    import raygent
    from raygent.stores import InMemoryStore
    from raygent.testing import FunctionModel, reply

    store = InMemoryStore()

    def count(messages: Any, options: Any) -> Any:
        return reply(f"seen {len(messages)}")

    bot = raygent.agent(model=FunctionModel(count), memory=raygent.Memory(store))
    rows = [
        {"id": "a1", "input": "first", "session_id": "alice"},
        {"id": "b1", "input": "first", "session_id": "bob"},
        {"id": "a2", "input": "second", "session_id": "alice"},
    ]
    result = await batch(bot, rows, concurrency=1)
    assert result.ok
    # alice's second run saw her first question and answer; bob's run saw only its own.
    assert result.data == ["seen 1", "seen 1", "seen 3"]
    alice = await bot.session("alice").history()
    assert [m.role for m in alice] == ["user", "assistant", "user", "assistant"]
    assert result.items[2].meta == {"id": "a2", "session_id": "alice"}


@pytest.mark.parametrize("item", [42, None, 3.5, object()], ids=["int", "None", "float", "object"])
async def test_an_item_that_is_no_input_is_named_in_raygents_words(item: Any) -> None:
    result = await batch(shouting_agent(), ["a", "b", "c", item])
    bad = result.items[3]
    assert isinstance(bad.error, InputError) and bad.attempts == 0  # refused, never run
    kind = type(item).__name__
    assert (
        str(bad.error) == f'items[3]: expected text, a message or a dict with "input", not {kind}'
    )
    assert result.data[:3] == ["A", "B", "C"]
