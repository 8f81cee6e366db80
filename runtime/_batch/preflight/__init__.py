"""A job checks itself before its first paid request and before anything is written to
its sink (`check_job`, run by `raygent.batch`, `batch_sync`, `estimate` and `raygent
batch`, in the driver on either backend, before any runner starts).

What is checked, from what each run of the job would use (`raygent.seams.planned`: an
agent plans its first request with the job's run options; a flow's agents are planned
with theirs), nothing sent and nothing written:

- the options' values: `model_options` as `ModelOptions` takes them, the output type,
  the system prompt and its placeholders, `server_compaction` (`problems`: each pydantic
  error located and said in a sentence);
- the models' capabilities against what the run asks: tools, server compaction, vision
  for image attachments, provider batches (`requests`);
- the body each model's adapter would send, against what its provider accepts: tool
  and output names and schemas (OpenAI's strict Structured Outputs rules, Anthropic's
  tool schema rules), service tiers (`schemas`);
- the stores (the agent's memory, durable runs, the response cache) by a round trip,
  and the sink's folder (`stores`).

Every problem found is listed in one `JobCheckError` (code `BATCH_JOB_CHECK`). What
depends on an item (its input, its images) is not known here: an error it meets at run
time may stop the job (`raygent._batch.stops`).

May import what the batch package may (it is part of it): the base, models, seams and
the stores, and the batch's own modules.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ...cache import ResponseCache
from ...durable.scope import scope_of
from ...errors import CapabilityError, InvalidOptionsError
from ...models.contract import ModelOptions
from ...seams.planned import Plannable, RunPlan, StoreUse
from ..job_budget import agents_of
from ..plan import Plan
from ..provider.job import check_batchable
from .problems import Problem, from_error, from_validation, refusal
from .requests import request_problems
from .stores import sink_problems, store_problems

__all__ = ["check_job"]

# What a batch gives each run itself (its signal; its scope, per attempt): not checked.
_OWN = frozenset({"signal", "scope"})
_REPLANS = 3  # plans again without what was refused, to find the other problems too


async def check_job(executable: Any, plan: Plan) -> None:
    """Raise `JobCheckError` listing every problem found (see the module docstring);
    return if there is none."""
    run_options = {k: v for k, v in (plan.run_options or {}).items() if k not in _OWN}
    problems: list[Problem] = _scope_problems(run_options)
    runs = _plans(executable, run_options, problems)
    for run in runs:
        for request in run.requests:
            problems.extend(request_problems(request))
    if plan.provider_batch is not None and plan.route is None:  # a route weighs its ways
        try:
            check_batchable(executable)
        except InvalidOptionsError as exc:
            problems.append(from_error(exc, "provider_batch", "leave provider_batch out"))
    if plan.sink_job is not None:
        problems.extend(sink_problems(plan.sink_job))
    stores: list[tuple[StoreUse, Any]] = [s for run in runs for s in run.stores]
    if plan.durable is not None:
        stores.append(("durable", plan.durable.store))
    cache = run_options.get("cache")
    if isinstance(cache, ResponseCache) and cache.store is not None:
        stores.append(("cache", cache.store))
    problems.extend(await store_problems(stores))
    if problems:
        raise refusal(_once(problems))


def _plans(executable: Any, run_options: dict[str, Any], problems: list[Problem]) -> list[RunPlan]:
    """What each run would use: the executable's, or each agent's of a flow (with its
    own options: a flow does not pass the job's on)."""
    if isinstance(executable, Plannable):
        planned = _plan(executable, run_options, problems)
        return [] if planned is None else [planned]
    runs = []
    for agent in agents_of(executable):
        if isinstance(agent, Plannable):
            planned = _plan(agent, {}, problems)
            if planned is not None:
                runs.append(planned)
    return runs


def _plan(
    executable: Plannable, run_options: dict[str, Any], problems: list[Problem]
) -> RunPlan | None:
    """The run's plan; what it refuses becomes problems, and it is planned again without
    that, so that the other problems are found too."""
    who = f"{type(executable).__name__.lower()} {executable.name!r}"
    options = dict(run_options)
    for _ in range(_REPLANS):
        try:
            return executable.plan_run(options)
        except ValidationError as exc:
            in_options = exc.title == ModelOptions.__name__  # the agent's or the call's
            problems.extend(from_validation(exc, f"{who}: {_where(in_options)}"))
            located = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            if not in_options or not located:
                return None
            # Planned again with those unset (over the agent's own as well).
            given = options.get("model_options") or {}
            options["model_options"] = {**given, **dict.fromkeys(located)}
        except CapabilityError as exc:
            problems.append(from_error(exc, who))
            if getattr(exc, "capability", None) != "server_compaction":
                return None
            options["server_compaction"] = False
        except Exception as exc:
            problems.append(from_error(exc, f"{who}: run_options"))
            return None
    return None


def _scope_problems(run_options: dict[str, Any]) -> list[Problem]:
    """The session the run options name for every run (`session_id`, `user_id`,
    `metadata`), as a store would key it."""
    if not {"session_id", "user_id", "metadata"} & set(run_options):
        return []
    try:
        scope_of(run_options.get("session_id") or "-", run_options.get("user_id"),
                 run_options.get("metadata"))  # fmt: skip
    except (TypeError, ValueError) as exc:
        return [from_error(exc, "run_options", "give strings: session_id, user_id, metadata")]
    return []


def _where(in_options: bool) -> str:
    return "model_options" if in_options else "run_options"


def _once(problems: list[Problem]) -> list[Problem]:
    """Each problem once (a flow's agents may share a model, a store)."""
    return list(dict.fromkeys(problems))
