"""`raygent batch MODULE:AGENT INPUT -o OUTPUT`: the command behind the subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from .._sync import run_sync
from ..cache import ResponseCache
from ..errors import InvalidOptionsError
from ..seams import backend_plugin, current_backend, init
from ..spend import Budget
from .call import BatchOptions, BatchResult, Retry, batch_sync
from .estimate import Estimate, estimate
from .provider import ProviderBatch

__all__ = ["load_target", "run_batch_command"]

INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT
DECLINED = 3  # the job was estimated over --confirm-over and the answer was no


def run_batch_command(args: argparse.Namespace) -> int:
    options = BatchOptions(sink=args.output, resume=args.resume, progress=args.progress)
    if args.concurrency is not None:
        options["concurrency"] = args.concurrency
    if args.retries is not None:
        options["retry"] = Retry(attempts=args.retries + 1)
    if args.item_key is not None:
        options["item_key"] = args.item_key
    if args.provider_batch:
        timing = {
            name: value
            for name in ("poll_seconds", "gather_seconds", "max_waiting")
            if (value := getattr(args, name, None)) is not None
        }
        options["provider_batch"] = ProviderBatch(**timing)
    if getattr(args, "budget_usd", None) is not None:
        options["budget"] = Budget(usd=args.budget_usd)
    try:
        if args.cache is not None:
            options["cache"] = ResponseCache.at(args.cache, ttl=args.cache_ttl)
        if args.backend is not None:
            init(args.backend)
        executable = load_target(args.target)
        _ship_by_value(args.target)
        declined = _estimated(executable, args)
        if declined is not None:
            return declined
        result = batch_sync(executable, args.input, **options)
    except (
        ImportError,
        AttributeError,
        TypeError,
        ValueError,
        OSError,
        InvalidOptionsError,
    ) as exc:
        print(f"raygent batch: {exc}", file=sys.stderr)
        return 2
    print(summary(result), file=sys.stderr)
    report = result.report
    if report.stopped is not None and report.stopped.startswith("cancelled"):
        return INTERRUPTED
    return 0 if result.ok else 1


def _estimated(executable: Any, args: argparse.Namespace) -> int | None:
    """`--estimate`: print the estimate, and stop (0). `--confirm-over USD`: print it,
    and ask before a job estimated over USD (no: stop, `DECLINED`). None: run the job."""
    confirm = getattr(args, "confirm_over", None)
    if not getattr(args, "estimate", False) and confirm is None:
        return None
    guess: Estimate = run_sync(
        lambda: estimate(executable, args.input, sample=args.sample, concurrency=args.concurrency)
    )
    print(f"estimate: {guess}", file=sys.stderr)
    if args.estimate or confirm is None:
        return 0
    over = guess.cost_usd is None or (guess.cost_usd_high or guess.cost_usd) > confirm
    if not over:
        return None
    print(f"the job may cost over ${confirm:,.2f}; run it? [y/N] ", end="", file=sys.stderr)
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return None if answer in ("y", "yes") else DECLINED


def load_target(target: str) -> Any:
    """`package.module:name` (or `:name.attribute`), imported from the working directory
    too, as `python -m` would."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:AGENT, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _ship_by_value(target: str) -> None:
    """On Ray, a target imported from the working directory goes to the batch runners
    by value: the workers (on other machines, in other folders) need not import it."""
    if current_backend().name != "ray":
        return
    package = target.partition(":")[0].split(".")[0]
    module = sys.modules.get(package)
    origin = getattr(module, "__file__", None)
    if module is None or origin is None:
        return
    if os.path.abspath(origin).startswith(os.path.abspath(os.getcwd()) + os.sep):
        backend_plugin("ray").ship_by_value(module)


def summary(result: BatchResult) -> str:
    r = result.report
    line = (
        f"{r.total} items: {r.succeeded} completed, {r.failed} failed, {r.cancelled} cancelled"
        f"{f', {r.skipped} skipped (already done)' if r.skipped else ''}"
        f" in {r.duration:.1f} s ({r.throughput:.1f} items/s)"
    )
    if r.sink:
        line += f" -> {r.sink}"
    if r.cache_hits:
        line += f"\ncache: {r.cache_hits} trips answered, ${r.saved:.4f} saved"
    if r.errors:
        line += "\nerrors: " + ", ".join(f"{code} x{n}" for code, n in sorted(r.errors.items()))
    if r.budget is not None:
        b = r.budget
        line += (
            f"\nbudget: ${b.spent.usd:,.4f} spent, ${b.reserved.usd:,.4f} reserved, "
            f"{_left(b.left.get('usd'))} left"
        )
    if r.stopped:
        line += f"\nstopped: {r.stopped}"
    spent = r.provider_batch
    if spent is not None:
        line += f"\nprovider batches: {len(spent.batches)}, {spent.lines} lines"
        if spent.cost is not None and spent.online_cost is not None:
            line += f", ${spent.cost:.4f} (online: ${spent.online_cost:.4f})"
    return line


def _left(usd: float | None) -> str:
    return "no limit" if usd is None else f"${usd:,.4f}"
