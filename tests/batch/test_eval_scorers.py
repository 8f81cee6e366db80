"""`raygent.eval`: scorers, pass rates, failed runs, a judge agent, JSON and JUnit output."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from batch_support import fast_retry, shouting_agent
from pydantic import BaseModel

import raygent
from raygent import eval as ev
from raygent.errors import AuthenticationError, RateLimitError
from raygent.eval import Case, EvalReport, Score, evaluate
from raygent.testing import FunctionModel, ScriptedModel, reply
from raygent.usage import Usage

CASES = [
    {"input": "paris", "expected": "PARIS", "key": "capital"},
    {"input": "hello world", "expected": "WORLD", "key": "greeting"},
    {"input": "oslo", "expected": "Oslo", "key": "north"},
]


async def test_scorers_and_pass_rates() -> None:
    report = await evaluate(
        shouting_agent(),
        CASES,
        [
            ev.exact(),
            ev.contains(),
            ev.predicate(lambda output: len(output) < 6, name="short"),
            ev.predicate(lambda output, case: case.key != "north"),
        ],
    )
    scores = {c.key: {s.scorer: s.passed for s in c.scores} for c in report.cases}
    assert scores["capital"] == {"exact": True, "contains": True, "short": True, "predicate": True}
    assert scores["greeting"] == {
        "exact": False,
        "contains": True,
        "short": False,
        "predicate": True,
    }
    assert scores["north"] == {"exact": False, "contains": True, "short": True, "predicate": False}
    assert [c.passed for c in report.cases] == [True, False, False]
    assert report.pass_rate == 1 / 3 and report.passed_count == 1 and report.failed_count == 2
    assert report.passed is False and report.errored_count == 0
    assert report.scorers == {"exact": 1 / 3, "contains": 1.0, "short": 2 / 3, "predicate": 2 / 3}
    assert report.usage.requests == 3 and report.judge_usage == Usage()
    greeting = report.cases[1]
    assert greeting.output == "HELLO WORLD" and greeting.expected == "WORLD"
    assert "expected 'WORLD', got 'HELLO WORLD'" in (greeting.scores[0].reason or "")


async def test_the_suite_passes_only_when_every_case_passes() -> None:
    ten = [{"input": str(n), "expected": "0"} for n in range(10)]
    one_in_ten = await evaluate(shouting_agent(), ten, [ev.exact()])
    assert one_in_ten.passed is False  # `assert report.passed` stays red
    assert (one_in_ten.passed_count, one_in_ten.failed_count, one_in_ten.total) == (1, 9, 10)
    all_ten = await evaluate(shouting_agent(), ten, [ev.predicate(lambda output: True)])
    assert all_ten.passed is True and all_ten.passed_count == 10 and all_ten.failed_count == 0
    empty = await evaluate(shouting_agent(), [], [ev.exact()])
    assert empty.passed is False and empty.total == 0  # nothing ran: nothing passed


async def test_a_case_whose_run_errored_fails_the_suite_whatever_the_scorers() -> None:
    def step(messages: Any, options: Any) -> Any:
        text = messages[-1].text
        return AuthenticationError("bad key") if text == "boom" else text

    agent = raygent.agent(model=FunctionModel(step), name="echo")
    always = ev.predicate(lambda output: True)
    report = await evaluate(agent, ["fine", "boom"], [always])
    assert report.passed is False
    assert (report.passed_count, report.failed_count, report.errored_count) == (1, 1, 1)


async def test_exact_compares_structured_output_and_options() -> None:
    class City(BaseModel):
        name: str

    agent = raygent.agent(model=FunctionModel(lambda m, o: '{"name": "Paris"}'), output=City)
    cases = [{"input": "x", "expected": {"name": "Paris"}}, {"input": "y", "expected": "nope"}]
    report = await evaluate(agent, cases, [ev.exact()])
    assert [c.passed for c in report.cases] == [True, False]
    assert report.cases[0].output == City(name="Paris")
    loose = await evaluate(
        shouting_agent(), [{"input": "a", "expected": " a "}], [ev.exact(case_sensitive=False)]
    )
    assert loose.passed is True and loose.passed_count == 1


async def test_a_failed_run_fails_its_case_whatever_the_scorers() -> None:
    def step(messages: Any, options: Any) -> Any:
        text = messages[-1].text
        return AuthenticationError("bad key") if text == "boom" else text

    agent = raygent.agent(model=FunctionModel(step), name="echo")
    report = await evaluate(
        agent, [{"input": "fine"}, {"input": "boom"}], [ev.predicate(lambda output: True)]
    )
    fine, boom = report.cases
    assert fine.passed and not boom.passed
    assert boom.status == "failed" and boom.error is not None
    assert boom.error["code"] == "PROVIDER_AUTHENTICATION"
    assert boom.scores[0].passed is False and "run ended failed" in (boom.scores[0].reason or "")


async def test_a_judge_agent_grades_and_its_usage_is_counted() -> None:
    verdicts = ScriptedModel(
        [
            reply('{"passed": true, "score": 0.9, "reason": "names the city"}'),
            reply('{"passed": true, "score": 0.4, "reason": "vague"}'),
        ]
    )
    judge_agent = raygent.agent(model=verdicts, name="judge")
    scorer = ev.judge(agent=judge_agent, rubric="Names the capital.", threshold=0.5)
    report = await evaluate(shouting_agent(), CASES[:2], [scorer], concurrency=1)
    first, second = (c.scores[0] for c in report.cases)
    assert first.passed and first.value == 0.9 and first.reason == "names the city"
    assert not second.passed and second.value == 0.4  # passed, but under the threshold
    assert report.judge_usage.requests == 2
    prompt = verdicts.requests[0][0][-1].text
    assert "Names the capital." in prompt and "PARIS" in prompt and "paris" in prompt


async def test_a_judge_failing_retryably_is_retried() -> None:
    paid = Usage(requests=1, input_tokens=7)
    verdicts = ScriptedModel([RateLimitError("busy"), reply('{"passed": true}', usage=paid)])
    scorer = ev.judge(agent=raygent.agent(model=verdicts), rubric="Anything.")
    report = await evaluate(shouting_agent(), ["a"], [scorer], retry=fast_retry())
    assert report.cases[0].passed and report.judge_usage == paid


async def test_a_scorer_that_raises_fails_its_score_only() -> None:
    def broken(output: str) -> bool:
        raise KeyError("oops")

    class Custom:
        name = "custom"

        async def score(self, case: Case, output: Any, result: Any) -> Score:
            return Score(passed=output.startswith("A"), value=1.0)

    report = await evaluate(shouting_agent(), ["abc"], [ev.predicate(broken), Custom()])
    broken_score, custom_score = report.cases[0].scores
    assert not broken_score.passed and "KeyError" in (broken_score.reason or "")
    assert custom_score.passed and custom_score.scorer == "custom"


async def test_json_and_junit_output() -> None:
    def step(messages: Any, options: Any) -> Any:
        text = messages[-1].text
        return AuthenticationError("bad key") if text == "boom" else text.upper()

    agent = raygent.agent(model=FunctionModel(step), name="shout")
    cases = [*CASES, {"input": "boom", "key": "broken"}]
    report = await evaluate(agent, cases, [ev.exact(), ev.exact()])
    assert list(report.scorers) == ["exact", "exact#2"]

    data = json.loads(report.to_json())
    assert data["total"] == 4 and data["passed"] is False
    assert (data["passed_count"], data["failed_count"], data["errored_count"]) == (1, 3, 1)
    assert EvalReport.model_validate(data).cases[0].key == "capital"

    root = ET.fromstring(report.to_junit())
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "shout"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")
    cases_xml = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases_xml) == {"capital", "greeting", "north", "broken"}
    assert cases_xml["capital"].find("failure") is None
    failure = cases_xml["greeting"].find("failure")
    assert failure is not None and "exact" in (failure.text or "")
    error = cases_xml["broken"].find("error")
    assert error is not None and error.get("type") == "PROVIDER_AUTHENTICATION"
    assert ev.to_junit(report) == report.to_junit() and ev.to_json(report) == report.to_json()
