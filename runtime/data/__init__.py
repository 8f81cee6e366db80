"""Ray Data in and out: `raygent.data.map(dataset, executable)` runs an executable on
every row of a `ray.data.Dataset` as a Ray Data stage, and returns the dataset with each
row's result.

The stage is a `map_batches` over an actor pool (`raygent.actors.batch.data_stage`); Ray is
imported on demand, never by this module. Each row gains these columns, named
`<output_column>_<field>` (`result_status`, `result_text`, ... by default):

- `status`: "completed", "failed", "cancelled" or "awaiting_approval";
- `text`: the run's text (None unless it has one);
- `data`: the run's data as JSON (the structured output, else the text; None unless
  completed);
- `error_code`, `error_message`: the last attempt's error (None if none);
- `input_tokens`, `output_tokens`, `cost` (USD; None without pricing): over every attempt;
- `attempts`: attempts made; `run_id`: the last attempt's run id (None for a plain
  callable).

A row that fails (its input cannot be read, the run fails after its retries) is a row
with its error: it never fails the job.

May import the base, seams and batch (its engine, retry and input rules); the Ray Data
stage itself lives in raygent.actors (`batch.data_stage`), imported when `map` is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._batch.plan import refuse_unknown_options
from ..seams import backend_plugin, current_backend
from ..seams.retry import Retry

__all__ = ["map"]


def map(
    dataset: Any,
    executable: Any,
    *,
    input: str | Callable[[dict[str, Any]], Any] = "input",
    output_column: str = "result",
    concurrency: int = 64,
    retry: Retry | None = None,
    run_options: Mapping[str, Any] | None = None,
    actors: int | None = None,
    num_cpus: float = 0.25,
    batch_size: int | None = None,
) -> Any:
    """`dataset` (a `ray.data.Dataset`) with each row's result columns (see the module
    docstring), as a lazy stage: nothing runs until the dataset is consumed
    (`write_parquet`, `iter_rows`, `materialize`...).

    `executable`: an agent, a workflow, a supervisor (anything with an async
    `execute(input, **run_options)`), or an async callable `fn(value)`. `input`: the
    column whose value is the run's input (a str, messages, or a mapping with an
    `input` field, as in `raygent.batch`), or `fn(row) -> input`; a row without a value
    fails as an input error. `concurrency`: runs in flight across the whole pipeline,
    split among `actors` actors (default: one per 128, at most one per CPU).
    `retry`: per-row retries (`Retry()` by default). `num_cpus`: what each actor
    reserves; `batch_size`: rows per Ray Data batch (default: an actor's share: each
    actor is given more rows than its share, so that its runs stay in flight while a
    batch waits for its slowest row).

    Model calls go through the executable's backend (else the current one): on Ray, its
    gateways, so provider bounds hold across the actors.
    """
    # A run option the executable does not take is refused here, before any actor.
    refuse_unknown_options({"run_options": run_options}, executable, subject="raygent.data.map()")
    backend = getattr(executable, "backend", None) or current_backend()
    try:
        return backend_plugin("ray").map_dataset(
            dataset,
            executable,
            input=input,
            output_column=output_column,
            concurrency=concurrency,
            retry=retry or Retry(),
            run_options=run_options,
            actors=actors,
            num_cpus=num_cpus,
            batch_size=batch_size,
            backend=backend,
        )
    except ModuleNotFoundError as exc:  # Ray Data's pandas, without the extra
        raise ImportError(
            "raygent.data.map needs the data extra: pip install 'raygent[data]'"
        ) from exc
