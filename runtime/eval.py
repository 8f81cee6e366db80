"""`raygent.eval`: score an agent on cases, run on `raygent.batch`.

    from raygent import eval as ev
    report = await agent.eval(
        [{"input": "Capital of France?", "expected": "Paris"}],
        scorers=[ev.contains(), ev.judge(agent=judge, rubric="Names the capital.")],
    )
    print(report.pass_rate, report.scorers)
    Path("junit.xml").write_text(report.to_junit())
    assert report.passed  # the suite's verdict: every case passed


A case is a str or a mapping with `input`, optional `expected`, and `key`/`id`; its
other fields are in `case.meta`. A case passes only when its run completed and every
scorer passed; the suite passes (`EvalReport.passed`) only when it has cases and every
one passed. The runs are one batch (the `BatchOptions` apply: concurrency, retry,
signal, ...); the scoring, judge runs included, is a second batch with the same bounds.
"""

from __future__ import annotations

import inspect
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Unpack

from ._batch.call import BatchItem, BatchOptions, BatchReport, batch
from ._batch.sinks import dumps, error_dict
from .errors import RaygentError
from .observers.views import ROWS, STYLE, badge, bar, clip, esc, more, secs, table, usage_line
from .usage import Usage

__all__ = [
    "Case",
    "CaseReport",
    "EvalReport",
    "Score",
    "Scorer",
    "contains",
    "evaluate",
    "exact",
    "judge",
    "predicate",
    "run",
    "to_json",
    "to_junit",
]


@dataclass(frozen=True)
class Case:
    """One case as a scorer sees it."""

    key: Any
    input: Any
    expected: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)


class Score(BaseModel):
    """One scorer's verdict on one case; `usage` is what scoring cost (a judge's run)."""

    model_config = ConfigDict(extra="forbid")
    scorer: str = ""
    passed: bool
    value: float | None = None
    reason: str | None = None
    usage: Usage | None = None


class Scorer(Protocol):
    """Anything with a `name` and an async `score(case, output, result)`; `output` is
    the run's data (its structured output, else its text), `result` the AgentResult."""

    name: str

    async def score(self, case: Case, output: Any, result: Any) -> Score: ...


class CaseReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    key: Any
    input: Any
    expected: Any = None
    output: Any = None
    status: str
    passed: bool
    scores: list[Score] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    latency: float | None = None
    usage: Usage = Field(default_factory=Usage)


class EvalReport(BaseModel):
    """Per case, per scorer, and pass rates (`scorers`: each scorer's pass rate over
    all cases; a case whose run failed fails every scorer).

    `passed` is the suite's verdict: True only when there are cases and every one passed
    (none failed a scorer, none errored). The counts: `passed_count + failed_count ==
    total`; `errored_count` of the failed are cases whose run did not complete."""

    model_config = ConfigDict(extra="forbid")
    name: str
    cases: list[CaseReport]
    passed: bool
    total: int
    passed_count: int
    failed_count: int
    errored_count: int
    pass_rate: float
    scorers: dict[str, float]
    usage: Usage
    judge_usage: Usage
    batch: BatchReport
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    def to_json(self, indent: int | None = 2) -> str:
        return to_json(self, indent)

    def to_junit(self) -> str:
        return to_junit(self)

    def _repr_html_(self) -> str:
        return eval_html(self)


def to_json(report: EvalReport, indent: int | None = 2) -> str:
    """The report as JSON (inputs and outputs as plain JSON values)."""
    return json.dumps(report.model_dump(mode="python"), default=_plain, indent=indent)


def to_junit(report: EvalReport) -> str:
    """The report as JUnit XML: a case is a testcase; a failed scorer a `failure`, a
    failed run an `error`."""
    suite = ET.Element(
        "testsuite",
        name=report.name,
        tests=str(report.total),
        failures=str(report.failed_count - report.errored_count),
        errors=str(report.errored_count),
        skipped="0",
        time=f"{report.batch.duration:.3f}",
        timestamp=report.created_at.isoformat(),
    )
    for case in report.cases:
        element = ET.SubElement(
            suite,
            "testcase",
            classname=f"raygent.eval.{report.name}",
            name=str(case.key),
            time=f"{case.latency or 0.0:.3f}",
        )
        if case.status != "completed":
            message = (case.error or {}).get("message") or f"the run ended {case.status}"
            kind = (case.error or {}).get("code") or case.status
            ET.SubElement(element, "error", message=str(message), type=str(kind))
        elif not case.passed:
            failing = [s for s in case.scores if not s.passed]
            detail = "\n".join(f"{s.scorer}: {s.reason or 'failed'}" for s in failing)
            names = ", ".join(s.scorer for s in failing)
            ET.SubElement(
                element, "failure", message=f"failed: {names}", type="score"
            ).text = detail
        ET.SubElement(element, "system-out").text = _as_text(case.output)
    root = ET.Element(
        "testsuites",
        name="raygent.eval",
        tests=suite.get("tests", "0"),
        failures=suite.get("failures", "0"),
        errors=suite.get("errors", "0"),
    )
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


# -- scorers ----------------------------------------------------------------------------


class _Exact:
    def __init__(self, name: str, case_sensitive: bool, strip: bool) -> None:
        self.name, self._case_sensitive, self._strip = name, case_sensitive, strip

    async def score(self, case: Case, output: Any, result: Any) -> Score:
        if case.expected is None:
            return Score(passed=False, reason="the case has no expected value")
        got, want = self._norm(output), self._norm(case.expected)
        if got == want:
            return Score(passed=True)
        return Score(passed=False, reason=f"expected {want!r}, got {got!r}"[:500])

    def _norm(self, value: Any) -> Any:
        value = _plain(value)
        if isinstance(value, str):
            value = value.strip() if self._strip else value
            value = value if self._case_sensitive else value.casefold()
        return value


class _Contains:
    def __init__(self, name: str, text: str | Sequence[str] | None, case_sensitive: bool) -> None:
        self.name, self._text, self._case_sensitive = name, text, case_sensitive

    async def score(self, case: Case, output: Any, result: Any) -> Score:
        wanted = self._text if self._text is not None else case.expected
        if wanted is None:
            return Score(passed=False, reason="nothing to look for: no text and no expected")
        needles = [wanted] if isinstance(wanted, str) else [str(w) for w in wanted]
        haystack = _as_text(output)
        if not self._case_sensitive:
            haystack, needles = haystack.casefold(), [n.casefold() for n in needles]
        missing = [n for n in needles if n not in haystack]
        return Score(passed=not missing, reason=f"missing: {missing}" if missing else None)


class _Predicate:
    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name, self._fn = name, fn
        try:
            params = inspect.signature(fn).parameters.values()
            positional = [
                p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            self._arity = min(len(positional), 3) or 1
        except (TypeError, ValueError):
            self._arity = 1

    async def score(self, case: Case, output: Any, result: Any) -> Score:
        value = self._fn(*(output, case, result)[: self._arity])
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Score):
            return value
        return Score(passed=bool(value), reason=None if value else "the predicate is false")


class JudgeVerdict(BaseModel):
    """What a judge agent answers."""

    passed: bool
    score: float | None = None
    reason: str = ""


class JudgeError(RaygentError):
    """The judge's run failed in a way worth retrying; `usage` is what it cost."""

    code = "EVAL_JUDGE_FAILED"
    category = "eval"

    def __init__(self, message: str, *, usage: Usage, retryable: bool) -> None:
        super().__init__(message, retryable=retryable)
        self.usage = usage


_JUDGE_PROMPT = """You are grading an answer against a rubric.

Rubric:
{rubric}

Input:
{input}

Expected (may be empty):
{expected}

Answer to grade:
{output}

Reply with JSON: {{"passed": true or false, "score": a number from 0 to 1, "reason": "why"}}."""


class _Judge:
    def __init__(self, name: str, agent: Any, rubric: str, threshold: float | None) -> None:
        self.name, self._agent, self._rubric, self._threshold = name, agent, rubric, threshold

    async def score(self, case: Case, output: Any, result: Any) -> Score:
        prompt = _JUDGE_PROMPT.format(
            rubric=self._rubric,
            input=_as_text(case.input),
            expected="" if case.expected is None else _as_text(case.expected),
            output=_as_text(output),
        )
        run = await self._agent.execute(prompt, output=JudgeVerdict)
        if not run.ok:
            error = run.error
            if getattr(error, "retryable", False):
                raise JudgeError(f"the judge failed: {error}", usage=run.usage, retryable=True)
            return Score(passed=False, reason=f"the judge failed: {error}", usage=run.usage)
        verdict: JudgeVerdict = run.data
        passed = verdict.passed
        if self._threshold is not None:
            passed = passed and verdict.score is not None and verdict.score >= self._threshold
        return Score(passed=passed, value=verdict.score, reason=verdict.reason, usage=run.usage)


def exact(*, case_sensitive: bool = True, strip: bool = True, name: str = "exact") -> Scorer:
    """The output equals the case's `expected` (pydantic output compares as its dump;
    text stripped unless `strip=False`)."""
    return _Exact(name, case_sensitive, strip)


def contains(
    text: str | Sequence[str] | None = None, *, case_sensitive: bool = False, name: str = "contains"
) -> Scorer:
    """The output's text contains `text` (all of them, if several), else the case's
    `expected`; case-insensitive unless `case_sensitive=True`."""
    return _Contains(name, text, case_sensitive)


def predicate(fn: Callable[..., Any], *, name: str | None = None) -> Scorer:
    """`fn(output)`, `fn(output, case)` or `fn(output, case, result)` (sync or async)
    returns a bool, or a `Score`."""
    label = name or str(getattr(fn, "__name__", "predicate"))
    return _Predicate("predicate" if label == "<lambda>" else label, fn)


def judge(
    *, agent: Any, rubric: str, threshold: float | None = None, name: str = "judge"
) -> Scorer:
    """An agent grades the output against `rubric`, answering `JudgeVerdict` (passed,
    score, reason); with `threshold`, its score must reach it too. A judge failing in a
    retryable way is retried by the batch's `retry`; its usage is counted in
    `EvalReport.judge_usage`."""
    return _Judge(name, agent, rubric, threshold)


# -- running ------------------------------------------------------------------------------


@dataclass
class _Scored:
    scores: list[Score]
    usage: Usage  # read by the batch as this item's usage


async def run(
    executable: Any, cases: Any, scorers: Iterable[Scorer], **options: Unpack[BatchOptions]
) -> EvalReport:
    """Run any executable (an agent, a workflow, a supervisor) on every case, then score
    each: `raygent.eval.run(flow, cases, scorers)`; `agent.eval(...)` is the same."""
    return await evaluate(executable, cases, scorers, **options)


async def evaluate(
    agent: Any, cases: Any, scorers: Iterable[Scorer], **options: Unpack[BatchOptions]
) -> EvalReport:
    """Run `agent` on every case, then score each; what `Agent.eval` calls. Results are
    kept in memory, so `sink` and `resume` are not accepted."""
    if options.get("sink") is not None or options.get("resume"):
        raise ValueError("eval keeps its results in memory: sink and resume do not apply")
    named = _named(scorers)
    runs = await batch(agent, cases, **options)

    async def score_item(item: BatchItem) -> _Scored:
        return await _score(item, named)

    scoring = await batch(score_item, runs.items, **_scoring_options(options))
    scored = {item.index: item for item in scoring.items}  # indexed by position in runs
    missing = BatchItem(-1, None, "cancelled")
    reports = [_case_report(run, scored.get(i, missing), named) for i, run in enumerate(runs.items)]
    passed = sum(1 for case in reports if case.passed)
    errored = sum(1 for case in reports if case.status != "completed")
    total = len(reports)
    rates = {
        name: _rate(
            sum(1 for c in reports for s in c.scores if s.scorer == name and s.passed), total
        )
        for name, _ in named
    }
    return EvalReport(
        name=str(getattr(agent, "name", None) or type(agent).__name__),
        cases=reports,
        passed=total > 0 and passed == total,
        total=total,
        passed_count=passed,
        failed_count=total - passed,
        errored_count=errored,
        pass_rate=_rate(passed, total),
        scorers=rates,
        usage=runs.usage,
        judge_usage=scoring.usage,
        batch=runs.report,
    )


def _scoring_options(options: BatchOptions) -> BatchOptions:
    """The scoring batch keeps the runs' bounds, retries and signal; nothing else. It
    runs in this process (scorers are quick, or judges whose model calls go through the
    backend anyway): nothing of the scorers has to travel to batch runners."""
    scoring = BatchOptions(progress=False, runners=0)
    if "concurrency" in options:
        scoring["concurrency"] = options["concurrency"]
    if "retry" in options:
        scoring["retry"] = options["retry"]
    if "signal" in options:
        scoring["signal"] = options["signal"]
    return scoring


async def _score(item: BatchItem, scorers: list[tuple[str, Scorer]]) -> _Scored:
    if not item.ok:
        reason = f"the run ended {item.status}"
        return _Scored([Score(scorer=n, passed=False, reason=reason) for n, _ in scorers], Usage())
    meta = dict(item.meta or {})
    case = Case(key=item.key, input=item.input, expected=meta.pop("expected", None), meta=meta)
    scores: list[Score] = []
    for name, scorer in scorers:
        try:
            score = await scorer.score(case, item.data, item.result)
        except JudgeError:
            raise  # retried by the scoring batch
        except Exception as exc:
            score = Score(passed=False, reason=f"the scorer raised {type(exc).__name__}: {exc}")
        scores.append(score.model_copy(update={"scorer": name}))
    return _Scored(scores, sum((s.usage for s in scores if s.usage is not None), Usage()))


def _case_report(
    run: BatchItem, scored: BatchItem, scorers: list[tuple[str, Scorer]]
) -> CaseReport:
    if scored.ok:
        scores: list[Score] = scored.data.scores
    else:
        reason = f"scoring failed: {scored.error}"
        scores = [Score(scorer=name, passed=False, reason=reason) for name, _ in scorers]
    expected = (run.meta or {}).get("expected")
    return CaseReport(
        index=run.index,
        key=run.key,
        input=run.input,
        expected=expected,
        output=run.data,
        status=run.status,
        passed=run.ok and scored.ok and all(s.passed for s in scores),
        scores=scores,
        error=error_dict(run.error) if not run.ok else None,
        latency=run.latency,
        usage=run.usage,
    )


def _named(scorers: Iterable[Scorer]) -> list[tuple[str, Scorer]]:
    # Two scorers of one name would share a pass rate: number the later ones.
    named: list[tuple[str, Scorer]] = []
    seen: dict[str, int] = {}
    for scorer in scorers:
        count = seen[scorer.name] = seen.get(scorer.name, 0) + 1
        named.append((scorer.name if count == 1 else f"{scorer.name}#{count}", scorer))
    return named


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _plain(value: Any) -> Any:
    """A JSON value for `value` (pydantic models as their dump)."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return json.loads(dumps(value))


def _as_text(value: Any) -> str:
    value = _plain(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def eval_html(report: EvalReport) -> str:
    """An eval: pass rate, each scorer's rate, usage and cost, and the first cases."""
    scorers = "".join(
        f"<tr><td>{esc(name)}</td><td>{bar(0.0, rate, 'trip')}</td><td>{rate:.0%}</td></tr>"
        for name, rate in report.scorers.items()
    )
    head = (
        f"<div><b>eval {esc(report.name)}</b> · {report.passed_count}/{report.total} passed "
        f"({report.pass_rate:.0%})</div>"
        f"<div>runs: {usage_line(report.usage)}</div>"
        f"<div>judges: {usage_line(report.judge_usage)}</div>"
        f"{table(['scorer', 'pass rate', ''], [scorers])}"
    )
    rows = []
    for case in report.cases[:ROWS]:
        verdict = "passed" if case.passed else "failed"
        scores = "<br>".join(
            f"{'✓' if s.passed else '✗'} {esc(s.scorer)}"
            + (f' <span class="meta">{esc(clip(s.reason))}</span>' if s.reason else "")
            for s in case.scores
        )
        error = (case.error or {}).get("message")
        shown = esc(clip(case.output))
        if error:
            shown = f'<span class="err">{esc(clip(error))}</span>'
        rows.append(
            f"<tr><td>{esc(clip(case.key))}</td><td>{badge(verdict, verdict)}</td>"
            f"<td>{esc(clip(case.input))}</td><td>{shown}</td>"
            f"<td>{esc(clip(case.expected))}</td><td>{scores}</td>"
            f"<td>{secs(case.latency)}</td></tr>"
        )
    listed = table(["case", "", "input", "output", "expected", "scores", "latency"], rows)
    return f'<div class="rg">{STYLE}{head}{listed}{more(len(report.cases))}</div>'
