"""Errors are typed, carry code/category/retryable, pickle across workers, hide secrets."""

from __future__ import annotations

import asyncio
import pickle
import re
import threading
from pathlib import Path

import pytest

from raygent import AbortController, Usage, errors
from raygent._batch import InputError
from raygent.abort import abortable
from raygent.actors import LeaseExpiredError, SessionHostError
from raygent.actors.batch.execution import RunnerLostError
from raygent.actors.batch.runner import UnsentResultError
from raygent.compaction import SummaryError
from raygent.errors import (
    AbortedError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    RateLimitError,
    RaygentError,
    ServerError,
    redact,
)
from raygent.eval import JudgeError
from raygent.stores import (
    PositionConflictError,
    RunConflictError,
    StoreDataError,
    StoreError,
    StoreUnavailableError,
)
from raygent.tools import ToolArgumentsError, ToolTimeoutError

ERRORS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
# Every error class outside raygent.errors, by the name the manual's table gives it.
ELSEWHERE: dict[str, type[RaygentError]] = {
    "raygent.tools.ToolArgumentsError": ToolArgumentsError,
    "raygent.tools.ToolTimeoutError": ToolTimeoutError,
    "raygent.compaction.SummaryError": SummaryError,
    "InputError (batch)": InputError,
    "raygent.eval.JudgeError": JudgeError,
    "raygent.stores.StoreError": StoreError,
    "raygent.stores.PositionConflictError": PositionConflictError,
    "raygent.stores.RunConflictError": RunConflictError,
    "raygent.stores.StoreDataError": StoreDataError,
    "raygent.stores.StoreUnavailableError": StoreUnavailableError,
    "raygent.actors.SessionHostError": SessionHostError,
    "raygent.actors.LeaseExpiredError": LeaseExpiredError,
    "RunnerLostError (Ray batch)": RunnerLostError,
    "UnsentResultError (Ray batch)": UnsentResultError,
}
# The reference's names: UPPER_SNAKE codes; `incomplete` is a category of its own.
EXPECTED: dict[type[RaygentError], tuple[str, str, bool]] = {
    RaygentError: ("RAYGENT_ERROR", "internal", False),
    AbortedError: ("ABORTED", "cancelled", False),
    errors.OfflineError: ("OFFLINE", "config", False),
    ProviderError: ("PROVIDER_ERROR", "provider", False),
    RateLimitError: ("PROVIDER_RATE_LIMITED", "provider", True),
    errors.ProviderTimeoutError: ("PROVIDER_TIMEOUT", "provider", True),
    errors.ProviderConnectionError: ("PROVIDER_CONNECTION", "provider", True),
    errors.AuthenticationError: ("PROVIDER_AUTHENTICATION", "provider", False),
    InvalidRequestError: ("PROVIDER_INVALID_REQUEST", "provider", False),
    ContextLengthExceededError: ("PROVIDER_CONTEXT_LENGTH", "provider", False),
    errors.ContentFilterError: ("PROVIDER_CONTENT_FILTER", "provider", False),
    errors.ContentBlockedError: ("PROVIDER_CONTENT_BLOCKED", "provider", False),
    errors.RecitationError: ("PROVIDER_RECITATION", "provider", True),
    errors.GuardrailInterventionError: ("PROVIDER_GUARDRAIL", "provider", False),
    errors.RefusalError: ("MODEL_REFUSAL", "provider", False),
    ServerError: ("PROVIDER_SERVER_ERROR", "provider", True),
    errors.ProviderResponseError: ("PROVIDER_BAD_RESPONSE", "provider", True),
    errors.ProviderBatchError: ("PROVIDER_BATCH", "provider", False),
    errors.ProviderBatchExpiredError: ("PROVIDER_BATCH_EXPIRED", "provider", False),
    errors.AgentCancelledError: ("AGENT_CANCELLED", "cancelled", False),
    errors.MaxTripsError: ("AGENT_MAX_TRIPS", "agent", False),
    errors.BudgetExceededError: ("BUDGET_EXCEEDED", "budget", False),
    errors.AgentIncompleteError: ("AGENT_INCOMPLETE", "incomplete", False),
    errors.SchemaValidationError: ("OUTPUT_VALIDATION", "output", False),
    errors.ToolExecutionError: ("TOOL_EXECUTION", "tool", False),
    errors.MCPServerError: ("MCP_SERVER", "tool", False),
    ToolArgumentsError: ("TOOL_INVALID_ARGUMENTS", "tool", False),
    ToolTimeoutError: ("TOOL_TIMEOUT", "tool", False),
    errors.InvalidOptionsError: ("INVALID_OPTIONS", "config", False),
    errors.SinkExistsError: ("BATCH_SINK_EXISTS", "config", False),
    errors.UnknownOptionError: ("UNKNOWN_OPTION", "config", False),
    errors.UnknownTenantError: ("UNKNOWN_TENANT", "config", False),
    errors.JobCheckError: ("BATCH_JOB_CHECK", "config", False),
    errors.JobStoppedError: ("BATCH_STOPPED", "cancelled", False),
    errors.DeadlineError: ("BATCH_DEADLINE", "config", False),
    errors.CapabilityError: ("MODEL_CAPABILITY", "config", False),
    errors.PromptError: ("PROMPT", "config", False),
    errors.AttachmentError: ("ATTACHMENT", "input", False),
    errors.OutboundPolicyError: ("OUTBOUND_POLICY", "policy", False),
    errors.AwaitingApprovalError: ("AGENT_AWAITING_APPROVAL", "approval", False),
    errors.DriftError: ("DURABLE_DRIFT", "durable", False),
    errors.ToolDeniedError: ("TOOL_DENIED", "tool", False),
    errors.StepFailedError: ("FLOW_STEP_FAILED", "flow", False),
    errors.MaxStepsError: ("FLOW_MAX_STEPS", "flow", False),
    errors.FlowOutputError: ("FLOW_OUTPUT", "output", False),
    errors.MaxIterationsError: ("SUPERVISOR_MAX_ITERATIONS", "flow", False),
    errors.RoutingError: ("SUPERVISOR_ROUTING", "flow", False),
    errors.RunNotFoundError: ("DURABLE_RUN_NOT_FOUND", "durable", False),
    SummaryError: ("COMPACTION_SUMMARY", "compaction", False),
    InputError: ("BATCH_INPUT", "input", False),
    JudgeError: ("EVAL_JUDGE_FAILED", "eval", False),
    StoreError: ("STORE", "store", False),
    PositionConflictError: ("STORE_POSITION_CONFLICT", "store", True),
    RunConflictError: ("STORE_RUN_CONFLICT", "store", False),
    StoreDataError: ("STORE_DATA", "store", False),
    StoreUnavailableError: ("STORE_UNAVAILABLE", "store", True),
    SessionHostError: ("SESSION_HOST_UNAVAILABLE", "store", True),
    LeaseExpiredError: ("SESSION_LEASE_EXPIRED", "store", True),
    RunnerLostError: ("RUNNER_LOST", "batch", False),
    UnsentResultError: ("UNSENT_RESULT", "batch", False),
}


def test_every_error_has_code_category_and_retryable() -> None:
    err = RateLimitError("slow down", provider="openai", status=429, retry_after=2.5)
    assert (err.code, err.category, err.retryable) == ("PROVIDER_RATE_LIMITED", "provider", True)
    assert err.retry_after == 2.5 and err.status == 429
    assert isinstance(err, ProviderError) and isinstance(err, RaygentError)
    assert not InvalidRequestError("bad").retryable
    assert isinstance(ContextLengthExceededError("big"), InvalidRequestError)
    assert RateLimitError("quota", retryable=False).retryable is False


def test_codes_and_categories_are_the_references() -> None:
    for cls, expected in EXPECTED.items():
        assert (cls.code, cls.category, cls.default_retryable) == expected, cls.__name__
        error = JudgeError("x", usage=Usage(), retryable=False) if cls is JudgeError else cls("x")
        assert (error.to_dict()["code"], error.to_dict()["category"]) == expected[:2]


def test_the_manuals_table_lists_the_whole_hierarchy() -> None:
    """One table in docs/errors.md: class, code, category, retryable by default, when."""
    section = ERRORS_PAGE.read_text()
    rows = re.findall(
        r"^\| `?([^|`]+?)`?(?: \(([^)]*)\))? \| `(\w+)` \| (\w+) \| (yes|no) \|", section, re.M
    )
    table: dict[type[RaygentError], tuple[str, str, bool]] = {}
    for name, where, code, category, retryable in rows:
        label = f"{name} ({where})" if where else name
        cls = ELSEWHERE.get(label) or getattr(errors, name)
        table[cls] = (code, category, retryable == "yes")
    assert table == EXPECTED
    in_errors = {
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, RaygentError)
    }
    assert in_errors <= set(table)


def test_errors_survive_pickling() -> None:
    err = ServerError("boom", provider="anthropic", status=529, request_id="req_1")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ServerError
    assert again.to_dict() == err.to_dict()
    assert str(again) == "boom"


def test_to_dict_is_json_ready() -> None:
    info = RateLimitError("x", provider="openai", retry_after=1.0).to_dict()
    assert info == {
        "type": "RateLimitError",
        "code": "PROVIDER_RATE_LIMITED",
        "category": "provider",
        "retryable": True,
        "message": "x",
        "provider": "openai",
        "retry_after": 1.0,
    }


def test_missing_detail_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = ServerError("x").nothing_here


def test_redact_hides_keys() -> None:
    text = "Incorrect API key provided: sk-proj-abc123XYZ. Header: Bearer sk-abcdefgh1234."
    out = redact(text, ("my-own-secret",))
    assert "sk-proj-abc123XYZ" not in out and "abcdefgh1234" not in out
    assert redact("key my-own-secret here", ("my-own-secret",)) == "key *** here"


async def test_abortable_cancels_the_await_and_raises_typed() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    controller.abort("user pressed stop")
    with pytest.raises(AbortedError) as info:
        await task
    assert info.value.reason == "user pressed stop"
    assert controller.signal.aborted


async def test_abort_from_another_thread() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    thread = threading.Thread(target=controller.abort, args=("from a thread",))
    thread.start()
    with pytest.raises(AbortedError):
        await task
    thread.join()


async def test_an_already_aborted_signal_raises_before_work() -> None:
    controller = AbortController()
    controller.abort()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    coro = work()
    with pytest.raises(AbortedError):
        await abortable(coro, controller.signal)
    coro.close()
    assert not ran


async def test_abort_after_completion_does_not_cancel_the_caller() -> None:
    controller = AbortController()

    async def quick() -> int:
        return 7

    assert await abortable(quick(), controller.signal) == 7
    controller.abort()
    # The task goes on: a late abort must not cancel unrelated awaits.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert asyncio.current_task() is not None and not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_outside_cancellation_is_not_turned_into_abort() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_signal_wait_returns_on_abort() -> None:
    controller = AbortController()
    waiter = asyncio.create_task(controller.signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    controller.abort()
    await asyncio.wait_for(waiter, 5)
