"""`raygent batch MODULE:AGENT INPUT -o OUTPUT`: the command behind the subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from typing import Any

from .._sync import run_sync
from ..budgets import Budget
from ..cache import ResponseCache
from ..errors import InvalidOptionsError
from ..seams import backend_plugin, current_backend, init
from ..usage import Usage, dollars, total_cost
from .call import RESUME_HINT, BatchOptions, BatchResult, Retry, batch_sync
from .estimate import Estimate, EstimateOptions, estimate
from .provider.options import ProviderBatch
from .report import BatchReport, counts_line, timing_text, tool_errors_text
from .sink_job import sink_job

__all__ = ["load_target", "resume_command", "run_batch_command"]

INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT
DECLINED = 3  # the job was estimated over --confirm-over and the answer was no


def run_batch_command(args: argparse.Namespace) -> int:
    if args.output is None and not getattr(args, "estimate", False):
        print("raygent batch: -o/--output is needed to run a job", file=sys.stderr)
        return 2
    options = BatchOptions(sink=args.output, resume=args.resume, progress=args.progress)
    if getattr(args, "mode", None) is not None:
        options["mode"] = args.mode
    if args.concurrency is not None:
        options["concurrency"] = args.concurrency
    if args.retries is not None:
        options["retry"] = Retry(attempts=args.retries + 1)
    if args.item_key is not None:
        options["item_key"] = args.item_key
    if getattr(args, "fail_on_tool_error", False):
        options["tool_errors"] = "fail"
    if args.provider_batch:
        timing = {
            name: value
            for name in ("poll_seconds", "gather_seconds", "max_waiting")
            if (value := getattr(args, name, None)) is not None
        }
        options["provider_batch"] = ProviderBatch(**timing)
    try:
        if args.output is not None and not getattr(args, "estimate", False):
            # First (before Ray, before an estimate pays for its sample): may the job
            # write its sink?
            sink_job(args.output, args.resume, options.get("mode"))
        if getattr(args, "budget_usd", None) is not None:
            options["budget"] = Budget(usd=args.budget_usd)
        if args.cache is not None:
            options["cache"] = ResponseCache.at(args.cache, ttl=args.cache_ttl)
        if args.backend is not None:
            init(args.backend)
        executable = load_target(args.target)
        _ship_by_value(args.target)
        declined, guess = _estimated(executable, args, options)
        if declined is not None:
            return declined
        if guess is not None:
            options["reuse"] = guess  # the sample's answers are the job's: not paid twice
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
    report = result.report
    interrupted = report.stopped is not None and report.stopped.startswith("cancelled")
    resume = resume_command(args) if interrupted and report.sink is not None else None
    print(summary(result, resume), file=sys.stderr)
    if interrupted:
        return INTERRUPTED
    return 0 if result.ok else 1


def resume_command(args: argparse.Namespace) -> str:
    """The command as it was given, with `--resume` (and without `--mode`)."""
    given: list[str] = list(getattr(args, "argv", None) or [])
    words: list[str] = []
    skip = False
    for word in given:
        if skip or word.startswith("--mode="):
            skip = False
            continue
        if word == "--mode":
            skip = True
            continue
        words.append(word)
    if "--resume" not in words:
        words.append("--resume")
    return shlex.join(["raygent", *words])


def _estimated(
    executable: Any, args: argparse.Namespace, options: BatchOptions
) -> tuple[int | None, Estimate | None]:
    """`--estimate`: print the estimate, and stop (0). `--confirm-over USD`: print it,
    and ask before a job estimated over USD (no: stop, `DECLINED`). (None, the estimate
    if any): run the job."""
    confirm = getattr(args, "confirm_over", None)
    if not getattr(args, "estimate", False) and confirm is None:
        return None, None
    job = EstimateOptions(
        cache=options.get("cache"),
        provider_batch=options.get("provider_batch"),
        item_key=options.get("item_key"),
    )
    guess: Estimate = run_sync(
        lambda: estimate(
            executable, args.input, sample=args.sample, concurrency=args.concurrency, **job
        )
    )
    print(f"estimate: {guess}", file=sys.stderr)
    if args.estimate or confirm is None:
        return 0, guess
    over = guess.cost_usd is None or (guess.cost_usd_high or guess.cost_usd) > confirm
    if not over:
        return None, guess
    print(f"the job may cost over {dollars(confirm)}; run it? [y/N] ", end="", file=sys.stderr)
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return (None, guess) if answer in ("y", "yes") else (DECLINED, guess)


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


def summary(result: BatchResult, resume: str | None = None) -> str:
    """What the command prints when the job ends; `resume`: the command that goes on
    with an interrupted job (said once, in place of the Python hint in `stopped`)."""
    r = result.report
    line = f"{counts_line(r)} in {timing_text(r)} ({r.throughput:.1f} items/s)"
    if r.sink:
        line += f" -> {r.sink}"
    line += f"\n{cost_line(result.usage)}"
    if r.cache_hits:
        line += f"\ncache: {r.cache_hits} trips answered, {dollars(r.saved)} saved"
    if r.tool_errors:
        line += f"\n{tool_errors_line(r)}"
    if r.throttled or r.rate_wait:
        line += (
            f"\nrates: {r.requests_per_minute:,.0f} requests/min, {r.throttled} 429s, "
            f"{r.rate_wait:.1f} s with a request waiting for a rate limit"
        )
    if r.cache_errors:
        line += (
            f"\ncache: its store could not be reached for {r.cache_errors} trips "
            "(those requests were sent; see the first warning above)"
        )
    if r.errors:
        line += "\nerrors: " + ", ".join(f"{code} x{n}" for code, n in sorted(r.errors.items()))
    if r.budget is not None:
        b = r.budget
        line += (
            f"\nbudget: {dollars(b.spent.usd)} spent, {dollars(b.reserved.usd)} reserved, "
            f"{_left(b.left.get('usd'))} left"
            + ("" if b.limit.usd is None else f" of {dollars(b.limit.usd)}")
        )
    if r.stopped:
        stopped = r.stopped.removesuffix(RESUME_HINT) if resume else r.stopped
        line += f"\nstopped: {stopped}"
        if resume:
            line += f"\nto go on with this job: {resume}"
    spent = r.provider_batch
    if spent is not None:
        line += f"\nprovider batches: {len(spent.batches)}, {spent.lines} lines"
        if spent.cost is not None and spent.online_cost is not None:
            line += f", {dollars(spent.cost)} (online: {dollars(spent.online_cost)})"
    return line


def tool_errors_line(report: BatchReport) -> str:
    """`tool errors: 300 failed calls in 300 items (first: ...)`: what a model read and
    went on from is not hidden behind "completed"."""
    line = f"tool errors: {tool_errors_text(report)}"
    if report.first_tool_error:
        first = report.first_tool_error
        line += f" (first: {first if len(first) <= 200 else first[:199] + '…'})"
    if report.errors.get("TOOL_EXECUTION"):
        return line
    return line + "; --fail-on-tool-error fails such items"


def cost_line(usage: Usage) -> str:
    """`cost: $0.0123 (300 requests, 45,000 in / 9,000 out tokens)`, on every run."""
    cost = total_cost(usage)
    money = "unknown (no pricing for the model)" if cost is None else dollars(cost)
    return (
        f"cost: {money} ({usage.requests:,} requests, "
        f"{usage.total_input_tokens:,} in / {usage.output_tokens:,} out tokens)"
    )


def _left(usd: float | None) -> str:
    return "no limit" if usd is None else dollars(usd)
