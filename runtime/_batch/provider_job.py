"""A batch job with `provider_batch=`: its checks, its ledger and pool, and the lines
set around each attempt of an item."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from ..abort import AbortSignal
from ..errors import InvalidOptionsError
from ..seams.batch import Attempt, Job, Outcome
from ..seams.lines import current_lines
from .item_lines import ItemLines, LineSender, batch_api_of, line_token
from .ledger import Ledger
from .lines import LinePool
from .provider import ProviderBatch
from .sinks import key_token

__all__ = ["check_batchable", "deadline_of", "item_lines", "line_pool", "with_lines"]


def check_batchable(executable: Any) -> None:
    """InvalidOptionsError, before anything is sent, unless the executable's model has a
    batch API (a fallback's first model must; the others go by batch where they can,
    else online)."""
    model = getattr(executable, "model", None)
    if model is None:
        raise InvalidOptionsError(
            "provider_batch= needs an agent (its model's requests go by batch), not"
            f" {type(executable).__name__}"
        )
    first = (getattr(model, "models", None) or [model])[0]
    if batch_api_of(first) is None:
        raise InvalidOptionsError(
            f"provider_batch=: {first!r} has no batch API (OpenAIModel on an OpenAI"
            " /v1 endpoint, OpenAIResponsesModel and AnthropicModel have one)"
        )


def deadline_of(value: float | datetime) -> float:
    """A deadline as time.time(): seconds from now, or a datetime (naive: local time)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and value >= 0:
        return time.time() + float(value)
    raise ValueError(f"deadline must be seconds from now or a datetime, not {value!r}")


def line_pool(options: ProviderBatch, sink: Any, resume: bool) -> LinePool:
    """The job's pool; with a sink its ledger lives beside it (and the job's name, in
    every line's id, comes from the sink's path), so a resumed job finds its batches."""
    if sink is None:
        return LinePool(options, Ledger(None, resume=False), uuid.uuid4().hex)
    path = Path(os.fspath(sink)).resolve()
    folder = path.parent / f"{path.name}.provider-batches"
    job = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
    return LinePool(options, Ledger(folder, resume=resume), job)


def item_lines(
    sender: LineSender, options: ProviderBatch, job_name: str, job: Job, deadline: float | None
) -> ItemLines:
    """The lines of one attempt of `job` (its own `deadline` field wins over the job's)."""
    own = (job.meta or {}).get("deadline")
    if own is not None:
        with contextlib.suppress(ValueError):  # an unreadable deadline: the job's holds
            deadline = deadline_of(own if not isinstance(own, str) else datetime.fromisoformat(own))
    token = line_token(job_name, key_token(job.key))
    # An attempt whose runner died is made again under the same ids: the lines it sent
    # (answered, or out) are its again, never sent twice.
    return ItemLines(sender, options, token, job.attempts - job.lost, deadline)


def with_lines(
    attempt: Attempt,
    sender: LineSender,
    options: ProviderBatch,
    job_name: str,
    deadline: float | None,
) -> Attempt:
    """`attempt`, with the item's trips sent as lines through `sender` (the job's pool,
    or on a Ray runner its relay to the driver's pool)."""

    async def run(job: Job, signal: AbortSignal) -> Outcome:
        token = current_lines.set(item_lines(sender, options, job_name, job, deadline))
        try:
            return await attempt(job, signal)
        finally:
            current_lines.reset(token)

    return run
