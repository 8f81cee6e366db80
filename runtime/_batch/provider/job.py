"""A batch job with `provider_batch=`: its checks, its ledger and pool, and the lines
set around each attempt of an item."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, Generator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ...abort import AbortSignal
from ...errors import InvalidOptionsError
from ...models._names import PYTHON, Spelling
from ...models.contract import parts_of
from ...seams.batch import Attempt, Feed, Job, LinedAttempt, Outcome
from ...seams.provider_lines import LineOptions
from ..active import ActiveSlots
from ..progress import Progress
from ..sinks import key_token
from .log import SubmissionLog
from .options import ProviderBatch
from .pool import LinePool
from .trip_lines import ItemLines, LineSender, Routed, batch_api_of, line_token

__all__ = [
    "check_batchable",
    "deadline_of",
    "item_lines",
    "line_pool",
    "max_waiting",
    "show_lines",
    "split_warning",
    "warn_past",
    "with_lines",
]

logger = logging.getLogger(__name__)
LINES_TICK = 1.0  # seconds between redraws of a provider-batch job's bar while it waits


def check_batchable(executable: Any, spelling: Spelling = PYTHON) -> None:
    """InvalidOptionsError, before anything is sent, unless the executable's model has a
    batch API (a fallback's first model must; the others go by batch where they can,
    else online)."""
    said = spelling.option("provider_batch", True)
    if getattr(executable, "model", None) is None:
        raise InvalidOptionsError(
            f"{said} needs an agent (its model's requests go by batch), not"
            f" {type(executable).__name__}"
        )
    first = _first_model(executable)
    if batch_api_of(first) is None:
        raise InvalidOptionsError(
            f"{said}: {first!r} has no batch API (OpenAIModel on an OpenAI"
            " /v1 endpoint, OpenAIResponsesModel, AnthropicModel, GeminiModel and"
            " BedrockModel have one; GeminiModel on Vertex AI with a project and"
            " batch_bucket='gs://bucket/prefix', not in express mode)"
        )


def max_waiting(options: ProviderBatch, executable: Any) -> int:
    """The most items of the job in flight at once (running or waiting for a line):
    `max_waiting`, else the most lines of one batch (`max_lines`, else the provider's
    limit), so that every item in flight can join one batch per trip."""
    if options.max_waiting is not None:
        return options.max_waiting
    api = batch_api_of(_first_model(executable))
    limit = api.max_lines if api is not None else 50_000
    return min(options.max_lines or limit, limit)


def _first_model(executable: Any) -> Any:
    """The agent's model, or a fallback's first: the one whose batch API a job uses."""
    model = getattr(executable, "model", None)
    return model if model is None else parts_of(model)[0]


def split_warning(items: int | None, waiting: int) -> str:
    """What a job of more `items` (None: not counted) than may wait at once is told."""
    told = f"{items} items" if items is not None else f"over {waiting} items"
    batches = -(-items // waiting) if items is not None else 2
    return (
        f"provider_batch: {told}, at most {waiting} in flight at once"
        f" (ProviderBatch(max_waiting=...)): each trip of the job goes in at least"
        f" {batches} provider batches, one after another"
    )


def deadline_of(value: float | timedelta | datetime) -> float:
    """A deadline as time.time(): seconds or a timedelta from now, or a datetime (naive:
    local time)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, int | float) and value >= 0:
        return time.time() + float(value)
    raise ValueError(f"deadline must be seconds from now or a datetime, not {value!r}")


def line_pool(options: ProviderBatch, sink: Any, resume: bool) -> LinePool:
    """The job's pool; with a sink its ledger lives beside it (and the job's name, in
    every line's id, comes from the sink's path), so a resumed job finds its batches."""
    if sink is None:
        return LinePool(options, SubmissionLog(None, resume=False), uuid.uuid4().hex)
    path = Path(os.fspath(sink)).resolve()
    folder = path.parent / f"{path.name}.provider-batches"
    job = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
    return LinePool(options, SubmissionLog(folder, resume=resume), job)


def item_lines(
    sender: LineSender,
    options: LineOptions,
    job_name: str,
    job: Job,
    deadline: float | None,
    route: Routed | None = None,
) -> ItemLines:
    """The lines of one attempt of `job` (its own `deadline` field wins over the job's;
    with a `route`, the job's route decides instead)."""
    own = (job.meta or {}).get("deadline")
    if own is not None:
        with contextlib.suppress(ValueError):  # an unreadable deadline: the job's holds
            deadline = deadline_of(own if not isinstance(own, str) else datetime.fromisoformat(own))
    key = key_token(job.key)
    token = line_token(job_name, key)
    # An attempt whose runner died is made again under the same ids: the lines it sent
    # (answered, or out) are its again, never sent twice.
    return ItemLines(sender, options, token, job.attempts - job.lost, deadline, route, key)


def with_lines(
    attempt: LinedAttempt,
    sender: LineSender,
    options: LineOptions,
    job_name: str,
    deadline: float | None,
    active: int | None = None,
    route: Routed | None = None,
) -> Attempt:
    """`attempt`, with the item's trips sent as lines through `sender` (the job's pool,
    or on a Ray runner its relay to the driver's pool); with `active`, at most that many
    attempts work at once, those waiting for lines aside (`ActiveSlots`); with a
    `route` (a job with a deadline), each trip goes the way it says."""
    slots = ActiveSlots(active) if active is not None else None

    async def run(job: Job, signal: AbortSignal) -> Outcome:
        if slots is None:
            lines = item_lines(sender, options, job_name, job, deadline, route)
            return await attempt(job, signal, lines)
        async with slots.working(sender) as releasing:
            lines = item_lines(releasing, options, job_name, job, deadline, route)
            return await attempt(job, signal, lines)

    return run


def warn_past(jobs: Feed, total: int | None, held: int) -> Feed:
    """`jobs`; a provider-batch job of more items than may be in flight at once is
    warned (its trips go in several batches): at once if its size is known, else when
    the item past that bound is read."""
    if total is not None:
        if total > held:
            logger.warning(split_warning(total, held))
        return jobs
    if isinstance(jobs, AsyncGenerator):
        return _warn_past_async(jobs, held)
    return _warn_past_sync(jobs, held)  # type: ignore[arg-type]


def _warn_past_sync(jobs: Generator[Job, None, None], held: int) -> Generator[Job, None, None]:
    try:
        for count, job in enumerate(jobs, 1):
            if count == held + 1:
                logger.warning(split_warning(None, held))
            yield job
    finally:
        jobs.close()


async def _warn_past_async(jobs: AsyncGenerator[Job, None], held: int) -> AsyncGenerator[Job, None]:
    try:
        count = 0
        async for job in jobs:
            count += 1
            if count == held + 1:
                logger.warning(split_warning(None, held))
            yield job
    finally:
        await jobs.aclose()


def show_lines(lines: LinePool, progress: Progress) -> asyncio.Task[None] | None:
    """The bar shows the job's batches and lines: as they go out, are polled and end,
    and every second between (the next poll counting down)."""
    if not progress.enabled:
        return None
    lines.on_change = lambda: progress.lines(lines.status())

    async def tick() -> None:
        while True:
            await asyncio.sleep(LINES_TICK)
            progress.lines(lines.status())

    return asyncio.get_running_loop().create_task(tick())
