"""A batch retry of an item on a session is the same run, not a new one: it continues
from what its failed attempt stored, so each item's input is stored once whatever the
save policy, and every stored history alternates as providers require (a user message,
then the assistant; each tool-call message followed by its results).

Against the simulator over real HTTP (5xx faults after a first trip, so the input and
a tool turn are stored before the failure) and a Redis server of the test's own that
is shut down in the middle of a run and started again (not the shared one on 6379).
Backends: local, Ray with batch runners, and Ray in the driver (`runners=0`: the
session goes through the session-host actors).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from backend_support import ray_test_backend
from batch_support import fast_retry, wait_until

import raygent
from raygent import AgentResult, Memory, Message
from raygent._batch import Retry
from raygent.errors import ServerError
from raygent.memory import SavePolicy
from raygent.messages import AssistantMessage, ToolMessage, UserMessage
from raygent.models import OpenAIModel
from raygent.seams import RunScope
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL
from raygent.sim import Fault, Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.stores import RedisStore, Scope, SQLiteStore, Store
from raygent.testing import FunctionModel

POLICIES: tuple[SavePolicy, ...] = ("message", "turn", "run")
# (backend, batch runners): runners=0 on Ray runs the items in the driver, their
# sessions on the session hosts; on runners a runner serves the sessions it is routed.
WHERE = {"local": ("local", None), "ray-runners": ("ray", 1), "ray-hosts": ("ray", 0)}
SESSIONS, PER_SESSION = 3, 2


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


def _questions() -> list[tuple[str, str]]:
    return [(f"s{s}", f"s{s} q{i}") for i in range(PER_SESSION) for s in range(SESSIONS)]


def _script(fault_after_tools: bool) -> list[Rule]:
    """Each question: a tool call, then (after its result) the answer; with
    `fault_after_tools`, the first request after the tool result is a 503."""
    rules = []
    for _, question in _questions():
        answer = Reply(text=f"answer to {question}")
        after = [Reply(fault=Fault(kind="status", status=503)), answer]
        rules += [
            Rule(
                match=Match(last_user=f"^{question}$", after_tool_result=True),
                reply=after if fault_after_tools else answer,
            ),
            Rule(
                match=Match(last_user=f"^{question}$"),
                reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": question})]),
            ),
        ]
    return rules


def _backend(where: str, request: pytest.FixtureRequest) -> tuple[Backend, int | None]:
    kind, runners = WHERE[where]
    if kind == "local":
        return LOCAL, runners
    request.getfixturevalue("ray_session")
    return ray_test_backend(), runners


def _agent(sim: Simulator, store: Store, policy: SavePolicy, backend: Backend) -> raygent.Agent:
    model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
    return raygent.agent(model=model, tools=[lookup], memory=Memory(store, policy), backend=backend)


async def _batch(agent: raygent.Agent, runners: int | None, **options: Any) -> Any:
    rows = [{"input": q, "session_id": s} for s, q in _questions()]
    if runners is not None:
        options["runners"] = runners
    return await raygent.batch(agent, rows, concurrency=4, progress=False, **options)


def assert_wellformed(history: Sequence[Message], questions: list[str]) -> None:
    """Each question once, in order, as a user message; the assistant answers each user
    message; every tool-call message is followed by exactly its results; the history
    ends with a final answer."""
    assert [m.text for m in history if isinstance(m, UserMessage)] == questions
    for at, message in enumerate(history):
        following = history[at + 1] if at + 1 < len(history) else None
        if isinstance(message, UserMessage):
            assert isinstance(following, AssistantMessage), (at, history)
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            ids = [c.call_id for c in message.tool_calls]
            results = history[at + 1 : at + 1 + len(ids)]
            assert [r.call_id for r in results if isinstance(r, ToolMessage)] == ids
            after = history[at + 1 + len(ids)] if at + 1 + len(ids) < len(history) else None
            assert isinstance(after, AssistantMessage), (at, history)
        elif isinstance(message, AssistantMessage):
            assert following is None or isinstance(following, UserMessage), (at, history)
    assert isinstance(history[-1], AssistantMessage) and not history[-1].tool_calls


async def _check_sessions(store: Store) -> None:
    for s in range(SESSIONS):
        history = await store.load(Scope(f"s{s}"))
        assert_wellformed(history, [f"s{s} q{i}" for i in range(PER_SESSION)])


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("policy", POLICIES)
async def test_a_retry_after_a_5xx_continues_what_its_attempt_stored(
    policy: SavePolicy, where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    backend, runners = _backend(where, request)
    store = SQLiteStore(tmp_path / "sessions.db")
    async with serve(_script(fault_after_tools=True)) as sim:
        result = await _batch(
            _agent(sim, store, policy, backend), runners, retry=fast_retry(attempts=3)
        )
        sent = len(sim.requests)
    assert result.report.succeeded == len(_questions()), result.report.errors
    await _check_sessions(store)
    for item in result.items:
        assert item.attempts == 2
        # The failed attempt's run id is the one that completed: one logical run.
        errors = await store.errors(Scope(item.meta["session_id"]))
        assert item.result.report.run_id in {e.run_id for e in errors}
        # Usage counts both attempts: the first attempt's tool trip included.
        assert item.usage.requests > item.result.usage.requests
    # Where the tool turn was stored (message, turn), the retry sends one request
    # (the answer), not the tool trip again; under `run` nothing was stored.
    per_item = 4 if policy == "run" else 3
    assert sent == per_item * len(_questions())
    await store.aclose()


# -- a Redis of the test's own, shut down in the middle of a run ------------------------


class RedisServer:
    """A redis-server on a free port, its data in an append-only file written through on
    every write: shut down and started again, it has every acknowledged write."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        arguments = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        # Every write on disk before it is acknowledged; no snapshots.
        arguments += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        self.process = subprocess.Popen(
            ["redis-server", *arguments],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.up, timeout=20, what="redis-server to answer")

    def up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None


def shut_down(port: int) -> None:
    """SHUTDOWN the server on `port` (from any process: a tool on Ray runs in a worker)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"SHUTDOWN NOSAVE\r\n")
        conn.recv(16)  # the server closes the connection as it goes


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _restarting_retry(server: RedisServer) -> Any:
    """A Retry whose wait starts the server again if it is down (the driver's: these
    batches run their items in the driver)."""

    async def wait(seconds: float) -> None:
        if not server.up():
            if server.process is not None:
                server.process.wait(timeout=20)
            server.start()
            server.restarts += 1

    return Retry(attempts=4, jitter=False, sleep=wait)


def _stopping_tool(port: int, marks: Path) -> Any:
    @raygent.tool(name="lookup")
    def stopping_lookup(q: str) -> str:
        """Look a question up."""
        mark = marks / "stopped"
        if q == "s1 q0" and not mark.exists():
            mark.touch()  # once: the first call for this question stops Redis
            shut_down(port)
        return f"found {q}"

    return stopping_lookup


@pytest.mark.parametrize("where", ["local", "ray-hosts"])
@pytest.mark.parametrize("policy", POLICIES)
async def test_a_store_restart_mid_run_leaves_each_input_once(
    policy: SavePolicy,
    where: str,
    redis_server: RedisServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    backend, runners = _backend(where, request)
    store = RedisStore(redis_server.url, prefix="same-run")
    async with serve(_script(fault_after_tools=False)) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
        agent = raygent.agent(
            model=model,
            tools=[_stopping_tool(redis_server.port, tmp_path)],
            memory=Memory(store, policy),
            backend=backend,
        )
        result = await _batch(agent, runners, retry=_restarting_retry(redis_server))
    assert redis_server.restarts == 1
    assert result.report.succeeded == len(_questions()), result.report.errors
    # Whichever items met the stopped server (the tool's own, or another one's store
    # call that came first) were retried.
    assert max(item.attempts for item in result.items) >= 2
    await _check_sessions(store)
    await store.aclose()


# -- a continued run whose answer is stored already ------------------------------------


async def test_a_continued_run_whose_answer_is_stored_returns_it_without_a_trip(
    tmp_path: Path,
) -> None:
    """The failed attempt stored its answer (its run failed after: here a middleware);
    the retry finds the answer in the store and returns it, no request sent."""
    asked: list[str] = []

    def model(messages: list[Message], options: Any) -> str:
        asked.append(messages[-1].text)
        return f"answer to {messages[-1].text}"

    class FailsOnce(raygent.Middleware):
        failed = False

        async def after_execute(self, run: Any, result: AgentResult) -> AgentResult:
            if not self.failed:
                self.failed = True
                raise ServerError("after the answer", provider="test", status=503)
            return result

    store = SQLiteStore(tmp_path / "s.db")
    agent = raygent.agent(
        model=FunctionModel(model),
        memory=Memory(store, "message"),
        middleware=[FailsOnce()],
        backend=LOCAL,
    )
    failed = await agent.execute("hello", session_id="s")
    assert failed.status == "failed" and failed.trail is not None
    assert [m.text for m in await store.load(Scope("s"))] == ["hello", "answer to hello"]
    # As a batch runs a retry: the failed attempt's run in the new attempt's scope.
    again = await agent.execute("hello", session_id="s", scope=RunScope(continues=failed))
    assert again.ok and again.text == "answer to hello"
    assert again.report.run_id == failed.report.run_id
    assert again.report.trips == [] and asked == ["hello"]  # no trip on the retry
    assert [m.text for m in await store.load(Scope("s"))] == ["hello", "answer to hello"]
    await store.aclose()


async def test_an_attempt_that_never_opened_the_session_passes_the_trail_on(
    tmp_path: Path,
) -> None:
    """Attempt 1 stores its input and a tool turn, then fails; attempt 2 ends before it
    opens the session (here: aborted while queued); attempt 3 still continues attempt 1."""
    failures = ["after the tool turn"]

    def model(messages: list[Message], options: Any) -> Any:
        from raygent.testing import call, reply

        if isinstance(messages[-1], ToolMessage):
            if failures:
                return ServerError(failures.pop(), provider="test", status=503)
            return reply("the answer")
        return reply("", tool_calls=[call("lookup", {"q": messages[-1].text})])

    store = SQLiteStore(tmp_path / "s.db")
    agent = raygent.agent(
        model=FunctionModel(model), tools=[lookup], memory=Memory(store, "message"), backend=LOCAL
    )
    first = await agent.execute("question", session_id="s")
    assert first.status == "failed"
    assert len(await store.load(Scope("s"))) == 3  # the input and the tool turn
    aborted = raygent.AbortController()
    aborted.abort("not now")
    second = await agent.execute(
        "question", session_id="s", signal=aborted.signal, scope=RunScope(continues=first)
    )
    assert second.status == "cancelled" and second.trail is not None
    third = await agent.execute("question", session_id="s", scope=RunScope(continues=second))
    assert third.ok and third.text == "the answer" and len(third.report.trips) == 1
    history = await store.load(Scope("s"))
    assert_wellformed(history, ["question"])
    assert third.report.run_id == second.report.run_id == first.report.run_id
    await store.aclose()
