"""`raygent.data.map` on Ray Data: a `map_batches` stage over an actor pool of runners.

Each actor of the pool is a `_DataRunner`: an async callable class, so Ray Data runs
its calls on one event loop per actor, several batches of a task at once. The
runs of every batch on an actor share one semaphore of `slots` places: the actors times
their slots is the `concurrency` of the whole pipeline, however Ray Data feeds them.
An actor is given more rows than it has places (two tasks at once, each with four
batches as large as its places), so the places stay taken: a batch ends only with its
slowest row, and the rows of the other batches take the places its finished rows
free meanwhile, at the end of a task as within one.
A batch's rows run through the batch engine's `InFlight` (per-item retry by `Retry`),
each row ends as its result columns (`raygent.data` documents them), and a row that
fails is a row with its error: the call never raises for a row.

Model calls go through the backend the driver chose (its gateways), so provider bounds
hold across the actors. Ray Data restarts an actor that dies and runs its lost tasks
again (`max_restarts`, `max_task_retries`): a task's rows are only output once it ends,
so each row comes out once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray.cloudpickle
import ray.data  # Ray Data needs pandas (the data extra): raygent.data says so if missing

from raygent.backend import (
    EMPTY_USAGE,
    Backend,
    BatchItem,
    InFlight,
    InputError,
    Job,
    Retry,
    agent_input,
    attempt_for,
    dumps,
    error_dict,
    is_runnable,
    use_backend,
)

from .._options import RayOptions
from .runner import load_executable
from .sizing import runner_count

if TYPE_CHECKING:
    from raygent.backend import RunOptions

__all__ = ["RESULT_FIELDS", "map_dataset"]

_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps

# The columns each row gains, by suffix (after `<output_column>_`), and their Arrow types.
RESULT_FIELDS: dict[str, str] = {
    "status": "string",
    "text": "string",
    "data": "string",  # the run's data (structured output, else the text) as JSON
    "error_code": "string",
    "error_message": "string",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "cost": "float64",
    "attempts": "int64",
    "run_id": "string",
}
BATCHES_PER_TASK = 4  # Ray Data's async batch concurrency within one task (its default)
# Two tasks run on an actor at once (their batches concurrently, all on its one loop),
# so the places a task's last batches leave free go to the next task's rows instead of
# idling until the task ends; one more task waits there, and the rest go to whichever
# actor frees first (measured: no more CPU per row than one task at a time, 1.3 against
# 1.5-1.7 ms). Rows per batch: as many as the actor's places, so that even one task
# keeps them taken while some of its batches wait for their slowest rows (with a
# quarter of them, a waiting batch left its finished rows' places idle: 7 of 8 taken).
CALLS_PER_ACTOR = 2
TASKS_PER_ACTOR = CALLS_PER_ACTOR + 1


def map_dataset(
    dataset: Any,
    executable: Any,
    *,
    input: str | Callable[[dict[str, Any]], Any],
    output_column: str,
    concurrency: int,
    retry: Retry,
    run_options: RunOptions | None,
    actors: int | None,
    num_cpus: float,
    batch_size: int | None,
    backend: Backend,
) -> Any:
    """The dataset with each row's result columns, as a lazy Ray Data stage."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    try:
        payload = _dumps(executable)
    except Exception as exc:
        raise TypeError(
            f"the executable cannot be shipped to Ray Data actors: {type(exc).__name__}: {exc}"
        ) from exc
    # Join Ray as the backend would (Ray Data may not have started it yet).
    options = getattr(backend.batches, "options", None)
    (options if isinstance(options, RayOptions) else RayOptions()).connect()
    count = runner_count(concurrency, actors)
    slots = concurrency // count
    rows = batch_size or slots
    return dataset.map_batches(
        _DataRunner,
        batch_format="pyarrow",
        batch_size=rows,
        zero_copy_batch=True,
        fn_constructor_args=(payload, backend, slots, input, output_column, retry, run_options),
        compute=ray.data.ActorPoolStrategy(
            # Up to `count` actors, all started at once; a dataset of fewer blocks
            # than actors leaves some idle (Ray Data warns of a minimum it cannot use).
            min_size=1,
            max_size=count,
            initial_size=count,
            max_tasks_in_flight_per_actor=TASKS_PER_ACTOR,
            max_concurrent_calls_per_actor=CALLS_PER_ACTOR,
        ),
        # Ray Data's actor pools restart a dead actor and retry its lost tasks by
        # default (max_restarts=-1, max_task_retries=-1): left as they are.
        num_cpus=num_cpus,
    )


class _DataRunner:
    """One actor of the pool: runs the rows of the batches it is given."""

    def __init__(
        self,
        payload: bytes,
        backend: Backend,
        slots: int,
        input: str | Callable[[dict[str, Any]], Any],
        output_column: str,
        retry: Retry,
        run_options: RunOptions | None,
    ) -> None:
        # Runs here use the driver's backend: the same gateways, the same bounds.
        use_backend(backend)
        executable = load_executable(payload)
        self._runnable = is_runnable(executable)
        self._attempt = attempt_for(executable, run_options)
        self._slots = slots
        self._input = input
        self._prefix = output_column
        self._retry = retry
        self._places: asyncio.Semaphore | None = None  # made on the actor's loop

    async def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if self._places is None:
            self._places = asyncio.Semaphore(self._slots)
        places = self._places
        attempt = self._attempt

        async def gated(job: Job, signal: Any) -> Any:
            async with places:
                return await attempt(job, signal)

        rows: list[dict[str, Any]] = batch.to_pylist()
        ended: dict[int, BatchItem] = {}

        async def deliver(item: BatchItem) -> None:
            ended[item.index] = item

        pool = InFlight(
            gated,
            concurrency=max(1, len(rows)),
            retry=self._retry,
            deliver=deliver,
        )
        await pool.run(self._jobs(rows))
        columns = _columns([ended[i] for i in range(len(rows))])
        for suffix, kind in RESULT_FIELDS.items():
            name = f"{self._prefix}_{suffix}"
            array = pa.array(columns[suffix], type=getattr(pa, kind)())
            if name in batch.column_names:
                batch = batch.drop_columns([name])
            batch = batch.append_column(name, array)
        return batch

    async def _jobs(self, rows: list[dict[str, Any]]) -> Any:
        for index, row in enumerate(rows):
            yield self._job(index, row)

    def _job(self, index: int, row: dict[str, Any]) -> Job:
        try:
            if callable(self._input):
                raw = self._input(row)
            else:
                if row.get(self._input) is None:
                    raise ValueError(f"the row has no {self._input!r} value")
                raw = row[self._input]
            if not self._runnable:
                return Job(index, index, input=raw)
            value, meta = agent_input(raw)
        except Exception as exc:
            error = InputError(f"row {index}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return Job(index, index, error=error)
        return Job(index, index, input=value, meta=meta)


def _columns(items: list[BatchItem]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {suffix: [] for suffix in RESULT_FIELDS}
    for item in items:
        result = item.result
        text = getattr(result, "text", None)
        error = None if item.error is None else error_dict(item.error)
        usage = item.usage
        cost = usage.cost
        run_id = getattr(getattr(result, "report", None), "run_id", None)
        columns["status"].append(item.status)
        columns["text"].append(text if isinstance(text, str) else None)
        columns["data"].append(None if item.data is None else _json(item.data))
        columns["error_code"].append(None if error is None else error.get("code", error["type"]))
        columns["error_message"].append(None if error is None else error.get("message"))
        columns["input_tokens"].append(0 if usage is EMPTY_USAGE else usage.input_tokens)
        columns["output_tokens"].append(0 if usage is EMPTY_USAGE else usage.output_tokens)
        columns["cost"].append(None if cost is None else cost.total)
        columns["attempts"].append(item.attempts)
        columns["run_id"].append(run_id if isinstance(run_id, str) else None)
    return columns


def _json(value: Any) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return json.dumps(str(value))
