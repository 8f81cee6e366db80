"""`raygent batch MODULE:AGENT INPUT -o OUTPUT`: the command behind the subcommand."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from .._sync import run_sync
from ..budgets import Budget
from ..cache import ResponseCache
from ..errors import InvalidOptionsError
from ..models._names import Spelling, check_model_options
from ..models.contract import ModelOptions
from ..seams import backend_plugin, current_backend, init
from ..usage import Usage, dollars, total_cost
from .call import BatchOptions, BatchResult, Retry, run_batch_sync
from .estimate import Estimate, EstimateOptions, check_estimate_options, estimate
from .plan import Plan, refuse_unknown_options
from .provider.job import check_batchable
from .provider.options import ProviderBatch
from .report import BatchReport, counts_line, timing_text, tool_errors_text
from .routing.options import deadline_text

__all__ = ["CLI", "load_target", "model_options_of", "resume_command", "run_batch_command"]

INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT
REFUSED = 2  # options, or a job's configuration, that cannot work: nothing (more) is sent
DECLINED = 3  # the job was estimated over --confirm-over and the answer was no

# How the command's messages name a job's options: by the flag that sets each.
CLI = Spelling(
    {
        "sink": "--output",
        "resume": "--resume",
        "mode": "--mode",
        "concurrency": "--concurrency",
        "retry": "--retries",
        "item_key": "--item-key",
        "progress": "--progress",
        "provider_batch": "--provider-batch",
        "cache": "--cache",
        "budget": "--budget-usd",
        "tool_errors": "--fail-on-tool-error",
        "service_tier": "--service-tier",
        "deadline": "--deadline",
        "route": "--deadline",
        # The command's run options are its model options.
        "run_options": "--model-option",
        "model_options": "--model-option",
        "sample": "--sample",
        "model": "--model",
    }
)


def run_batch_command(args: argparse.Namespace) -> int:
    if args.output is None and not getattr(args, "estimate", False):
        print("raygent batch: -o/--output is needed to run a job", file=sys.stderr)
        return REFUSED
    try:
        options = _options(args)
        # First (before Ray, before an estimate pays for its sample): do the options make
        # sense, and may the job write its sink? (An estimate writes none.)
        checked = options.copy()
        if getattr(args, "estimate", False):
            checked.pop("sink", None)
            checked.pop("resume", None)
            checked.pop("mode", None)
        Plan.of(checked, CLI)
        if getattr(args, "budget_usd", None) is not None:
            options["budget"] = Budget(usd=args.budget_usd)
        if args.cache is not None:
            options["cache"] = ResponseCache.at(args.cache, ttl=args.cache_ttl)
        if args.backend is not None:
            init(args.backend)
        executable = load_target(args.target)
        if getattr(args, "model", None) is not None:
            executable = with_model(executable, args.model)
        # What the target takes of the options, named by flag, before anything runs.
        refuse_unknown_options(options, executable, spelling=CLI)
        if args.provider_batch and "deadline" not in options:  # a route weighs its ways
            check_batchable(executable, CLI)
        _ship_by_value(args.target)
        declined, guess = _estimated(executable, args, options)
        if declined is not None:
            return declined
        if guess is not None:
            options["reuse"] = guess  # the sample's answers are the job's: not paid twice
        result = run_batch_sync(executable, args.input, options, CLI)
    except (
        ImportError,
        AttributeError,
        TypeError,
        ValueError,
        OSError,
        InvalidOptionsError,
    ) as exc:
        print(f"raygent batch: {exc}", file=sys.stderr)
        return REFUSED
    report = result.report
    stopped = report.stopped
    goes_on = stopped is not None and stopped.why in ("cancelled", "configuration")
    resume = resume_command(args) if goes_on and report.sink is not None else None
    print(summary(result, resume), file=sys.stderr)
    if stopped is not None and goes_on:
        # A configuration error every item would meet is a refusal, as before the job.
        return INTERRUPTED if stopped.why == "cancelled" else REFUSED
    return 0 if result.ok else 1


def _options(args: argparse.Namespace) -> BatchOptions:
    """The job's options, from the command's flags."""
    options = BatchOptions(sink=args.output, resume=args.resume, progress=args.progress)
    model_options = model_options_of(getattr(args, "model_option", None) or ())
    if model_options:
        options["run_options"] = {"model_options": model_options}
    if getattr(args, "service_tier", None) is not None:
        options["service_tier"] = args.service_tier
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
    if getattr(args, "deadline", None) is not None:
        options["deadline"] = deadline_text(args.deadline)
    if args.provider_batch:
        timing = {
            name: value
            for name in ("poll_seconds", "gather_seconds", "max_waiting")
            if (value := getattr(args, name, None)) is not None
        }
        options["provider_batch"] = ProviderBatch(**timing)
    return options


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
        run_options=options.get("run_options"),
        service_tier=options.get("service_tier"),
    )
    if options.get("deadline") is not None:
        job["deadline"] = options["deadline"]
    check_estimate_options(executable, job, CLI)
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


def model_options_of(pairs: Sequence[str]) -> dict[str, Any]:
    """`--model-option KEY=VALUE`s as model options: each VALUE read as JSON when it is
    JSON (`512`, `0.2`, `true`, `{"effort": "low"}`), else as a string (`flex`); a KEY
    no model option has, or a VALUE of the wrong kind, is refused (InvalidOptionsError)
    naming the flag."""
    given: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidOptionsError(
                f"--model-option takes KEY=VALUE (e.g. max_tokens=512), not {pair!r}",
                option="model_options",
            )
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        given[key] = value
    check_model_options(given, subject="--model-option", spelling=CLI)
    try:
        ModelOptions(**{k: v for k, v in given.items() if k != "signal"})
    except ValidationError as exc:
        issue = exc.errors(include_url=False)[0]
        key = str(issue["loc"][0])
        raise InvalidOptionsError(
            f"--model-option {key}={json.dumps(given.get(key))}: {issue['msg']}",
            option="model_options",
        ) from None
    return given


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


def with_model(executable: Any, name: str) -> Any:
    """`--model PROVIDER:NAME`: the target agent on that model. Only an agent has a
    model to replace: another target (a workflow, a function) is refused, as is a
    provider no adapter has (naming the closest)."""
    from ..models.by_name import adapter_of

    build, model = adapter_of(name, subject=f"--model {name}", spelling=CLI)
    replaced = getattr(executable, "with_model", None)  # `Agent.with_model`
    if not callable(replaced):
        raise InvalidOptionsError(
            f"--model replaces an agent's model; {type(executable).__name__} is not an "
            "agent (build its models in its module)",
            option="model",
        )
    return replaced(build(model))


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
        line += f"\nstopped: {r.stopped}"
        if resume:
            when = " once it is fixed" if r.stopped.why == "configuration" else ""
            line += f"\nto go on with this job{when}: {resume}"
    spent = r.provider_batch
    if spent is not None:
        line += f"\nprovider batches: {len(spent.batches)}, {spent.lines} lines"
        if spent.cost is not None and spent.online_cost is not None:
            line += f", {dollars(spent.cost)} (online: {dollars(spent.online_cost)})"
    if r.route is not None:
        line += f"\nroute: {r.route.line()}"
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
    """`cost: $0.0123 (300 requests, 45,000 in / 9,000 out tokens)`, on every run; then a
    line for each other model that ran inside those requests (an advisor), of which
    its tokens and cost are part."""
    cost = total_cost(usage)
    money = "unknown (no pricing for the model)" if cost is None else dollars(cost)
    line = (
        f"cost: {money} ({usage.requests:,} requests, "
        f"{usage.total_input_tokens:,} in / {usage.output_tokens:,} out tokens)"
    )
    for name, part in sorted((usage.other_models or {}).items()):
        spent = total_cost(part)
        paid = "unknown (no pricing for the model)" if spent is None else dollars(spent)
        line += (
            f"\n  of which {name}, run inside the requests (an advisor): {paid} "
            f"({part.total_input_tokens:,} in / {part.output_tokens:,} out tokens)"
        )
    return line


def _left(usd: float | None) -> str:
    return "no limit" if usd is None else dollars(usd)
