"""Batch: `raygent.batch` runs any executable (an agent, a flow, an async callable) over
many items.

call          `batch`, `batch_sync`, `BatchOptions`, `BatchResult`: reading, recording
engine        the in-flight core: attempts in flight, retries, each item ended once
preflight/    the job's check before its first request: options, capabilities, the
              providers' schema rules, stores and sink (`JobCheckError`)
stops         which errors stop a job (one every item would meet), and what it records
exec          what a batch runs: items into jobs, one attempt of the executable
job_budget    a job's budget: the agents it holds (an agent's, a flow's) and its ledger
durable       durable items: each item's run named by its key, so an attempt resumes it
              (through the executable's `is_stored` / `resume`; the journal itself is
              the executable's, on `raygent.durable.journal`)
sources       where items come from (lists, iterables, JSONL / CSV / Parquet, datasets)
sinks         where results go (JSONL, Parquet), and what `resume` skips
progress      the bar; report: `BatchReport`; _html: the notebook view of a result
estimate      `estimate`, `estimate_sync`, `Estimate`: a job's cost from a sample run
cli           `raygent batch MODULE:AGENT INPUT -o OUTPUT`
provider/     provider batches (the providers' batch APIs, half price): `ProviderBatch`,
              a job's pool of lines, each attempt's trips as lines, the on-disk log
routing/      a job with a deadline: `Route`; each item the cheapest way (provider
              batch, flex, standard, priority) that meets it, learning how long each
              way takes (in the stores' timings), changing course in time

A private name: `raygent.batch` is the public function, which a subpackage would shadow.
May import the base, models (the providers' batch APIs), seams, the cache and budgets
(a job's cache and budget), observers and durable (the types of `durable=` and
approvals), and the stores (the job's check makes a round trip through each store its
runs would use; a route keeps its timings there); never agents or flows (it runs any
executable, through its methods). The Ray batch runners (raygent.actors) run engine's
core; this package reaches them only through the backend (and cli, through importlib,
to ship a target by value on Ray).
"""

from .call import (
    BatchItem,
    BatchOptions,
    BatchReport,
    BatchResult,
    InputError,
    Retry,
    batch,
    batch_sync,
)
from .estimate import Estimate, EstimateOptions, estimate, estimate_sync
from .provider.options import ProviderBatch, ProviderBatchInfo, ProviderBatchSummary
from .report import Stopped
from .routing.options import Route, RouteSummary

__all__ = [
    "BatchItem",
    "BatchOptions",
    "BatchReport",
    "BatchResult",
    "Estimate",
    "EstimateOptions",
    "InputError",
    "ProviderBatch",
    "ProviderBatchInfo",
    "ProviderBatchSummary",
    "Retry",
    "Route",
    "RouteSummary",
    "Stopped",
    "batch",
    "batch_sync",
    "estimate",
    "estimate_sync",
]
