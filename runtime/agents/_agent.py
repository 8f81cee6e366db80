"""`raygent.agent(...)`: an agent is configuration; each call runs it once.

An agent holds no per-run state, so one agent serves many concurrent runs. The run
options are defined once (`RunOptions`) and shared by `execute`, `execute_sync` and
`stream`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

from typing_extensions import Unpack

from .._message_input import MessageLike, as_messages, check_answered, run_input
from .._sync import run_sync
from ..abort import AbortController, AbortSignal
from ..attachments import AttachmentLike, AttachmentPolicy
from ..budgets import Budget, BudgetLedger, LocalBudgetLedger
from ..cache import ResponseCache
from ..compaction.policy import Compaction
from ..durable.options import ApprovalHandler, Durable
from ..durable.scope import scope_of
from ..errors import InvalidOptionsError, RaygentError
from ..executable import Executable
from ..memory import Memory
from ..memory.save import RunSaver, default_memory
from ..messages import ContentPart, Message, SystemMessage
from ..models.by_name import model_from_name
from ..models.contract import Model, ModelOptions, ToolSpec
from ..observers import Observe, Observer
from ..observers.delivery import observers_for, own_observers
from ..observers.events import Dispatcher, Event, EventHandler, Handlers, handler_list
from ..observers.report import AgentResult
from ..run_context import RunInfo
from ..seams.attempt import RunScope, inherited
from ..seams.contract import Backend
from ..seams.registry import current_backend
from ..seams.tenants import tenant_scope
from ..tools import Tool
from ..toolsets import Toolset
from ._agent_tool import agent_tool
from ._durable_api import DurableRuns, journal_for
from ._guard import GuardSetting, guard_buffer
from ._model_options import agent_model_options, run_model_options
from ._options import (
    RUN_OPTIONS,
    RunOptions,
    ServerCompactionSetting,
    SystemPrompt,
    refusal,
    server_compaction_for,
)
from ._plan import RunPlan, first_request, stores_of
from ._retry_resume import continued_run_id, saver_for
from ._start import start_run
from ._state import RunConfig, RunState
from ._stream import AgentStream
from ._tool_round import tool_errors_setting
from .middleware import Middleware
from .output import OutputSpec
from .session import Session

if TYPE_CHECKING:
    from .._batch.call import BatchOptions
    from ..eval import EvalReport, Scorer

__all__ = ["Agent", "AgentStream", "RunOptions", "SystemPrompt", "agent"]


class Agent(DurableRuns):
    """Build with `raygent.agent(...)`."""

    # What a call takes (`RunOptions`): `raygent.batch` refuses any other run option
    # before anything runs (`raygent.executable.TakesRunOptions`).
    run_option_names = RUN_OPTIONS

    def __init__(
        self,
        *,
        model: Model | str,
        name: str | None,
        system_prompt: str | SystemPrompt | None,
        tools: Iterable[Tool[..., Any] | Agent | Any],
        placeholders: Mapping[str, Any] | None,
        max_trips: int,
        model_options: Mapping[str, Any] | None,
        output: Any,
        middleware: Iterable[Middleware],
        on: Handlers | None,
        version: str | None,
        capture_messages: bool,
        observe: Observe,
        continue_on_output_limit: int,
        tool_schemas: Literal["full", "compact"],
        streaming_tool_guard: GuardSetting,
        backend: Backend | None,
        memory: Memory | None = None,
        attachment_policy: AttachmentPolicy | None = None,
        compaction: Compaction | None = None,
        durable: Durable | None = None,
        approval_handler: ApprovalHandler | None = None,
        cache: ResponseCache | None = None,
        budget: Budget | None = None,
        tool_errors: Literal["continue", "fail"] = "continue",
        server_compaction: ServerCompactionSetting = None,
    ) -> None:
        self.tool_errors = tool_errors_setting(tool_errors)
        self.server_compaction = server_compaction  # checked per run: a run fails typed
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError("budget= takes raygent.Budget(...)")
        self.budget = budget
        if durable is not None and not isinstance(durable, Durable):
            raise TypeError("durable= takes raygent.Durable(store=...)")
        if isinstance(model, str):
            model = model_from_name(model)
        self.model = model
        self.cache = _checked_cache(cache)
        self.durable = durable
        self.approval_handler = approval_handler
        self.memory = memory
        self.compaction = compaction
        self.attachment_policy = attachment_policy or AttachmentPolicy()
        self.tools: dict[str, Tool[..., Any]] = {}
        # Toolsets (an MCP server's tools) are resolved when a run starts (_toolsets.py).
        self.toolsets: tuple[Toolset, ...] = ()
        for item in tools:
            if isinstance(item, Toolset):
                self.toolsets += (item,)
                continue
            # An executable (an agent, a workflow, a supervisor) is adapted into a tool.
            as_tool = item if isinstance(item, Tool) else _adapted(item)
            if as_tool.name in self.tools:
                raise ValueError(f"two tools are named {as_tool.name!r}")
            self.tools[as_tool.name] = as_tool
        self.name = name or _anonymous_name(model, self.tools)
        self.system_prompt = system_prompt
        self.placeholders = dict(placeholders or {})
        self.max_trips = max_trips
        self.model_options = agent_model_options(model_options)  # checked now, not per run
        self.output = output
        self.middleware = tuple(middleware)
        self.version = version
        self.capture_messages = capture_messages
        self.continue_on_output_limit = continue_on_output_limit
        self.tool_schemas = tool_schemas
        self.guard_max_buffer = guard_buffer(streaming_tool_guard)
        self.backend = backend
        self._factory_handlers = handler_list(on)
        # Observers get finished report trees (raygent.observers); `on=` gets events.
        self.observe: Observe = (
            observe if observe is None or isinstance(observe, bool) else own_observers(observe)
        )
        self._instance_handlers: list[tuple[str, EventHandler]] = []
        self._specs: dict[str, tuple[ToolSpec, ...]] = {}
        # The agent's own output is resolved once; a call's own output is resolved per
        # call and not kept (the agent holds nothing a call brought).
        self._output = None if output is None else OutputSpec(output)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model.name!r}, tools={list(self.tools)})"

    def with_model(self, model: Model | str) -> Agent:
        """This agent on another model (a `Model`, or `"PROVIDER:NAME"`), all else kept:
        a named agent keeps its name (and so its sessions and durable runs)."""
        other = copy.copy(self)
        other.model = model_from_name(model) if isinstance(model, str) else model
        if self.name == _anonymous_name(self.model, self.tools):
            other.name = _anonymous_name(other.model, other.tools)
        other._instance_handlers = list(self._instance_handlers)  # subscribed apart
        return other

    def on(self, event: str, handler: EventHandler) -> Callable[[], None]:
        """Subscribe to an event ("*" for all) on every run; returns an unsubscribe."""
        pair = (event, handler)
        self._instance_handlers.append(pair)
        return lambda: (
            self._instance_handlers.remove(pair) if pair in self._instance_handlers else None
        )

    async def execute(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """Run once. Never raises: failures come back typed on `result.error`, with
        `result.report.status` failed, cancelled or incomplete. (Cancelling the task that
        awaits this records the cancellation, then lets CancelledError through.)"""
        state, user_input = self._prepare(input, options, streaming=False, sink=None)
        return await start_run(state, user_input, *self._attachments(options))

    def execute_sync(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """`execute` from synchronous code (never raises, like `execute`). Works whether
        or not this thread runs an event loop: inside one (Jupyter, IPython), the run
        goes on a helper thread with a loop of its own and this call blocks until done."""
        return run_sync(lambda: self.execute(input, **options))

    def stream(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentStream:
        """Run once, yielding typed events; `await stream.result` gives what `execute`
        would have returned. `resume=run_id` streams a durable run's resume instead."""
        run_id = options.pop("resume", None)
        if run_id is not None:
            return self.stream_resume(run_id, **options)
        return AgentStream(self, input, options)

    def session(
        self,
        session_id: str,
        user_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Session:
        """A stored conversation: each run loads the history and saves by the memory's
        save policy; runs on one session go one after another, in arrival order. Without
        `memory=` on the agent, sessions use an SQLite file `raygent.db` here."""
        if self.memory is None:
            self.memory = default_memory()
        return Session(self, session_id, user_id=user_id, metadata=metadata)

    async def eval(
        self, cases: Any, scorers: Iterable[Scorer], **options: Unpack[BatchOptions]
    ) -> EvalReport:
        """Run on every case (on `raygent.batch`) and score each run; see `raygent.eval`."""
        from ..eval import evaluate

        return await evaluate(self, cases, scorers, **options)

    def as_tool(self, name: str | None = None, description: str | None = None) -> Tool[..., Any]:
        """This agent as a tool: the model gives it an input; it runs as a nested run."""
        return agent_tool(self, name=name, description=description)

    # -- preparing a run -----------------------------------------------------------------

    def _prepare(
        self,
        input: Any,
        options: RunOptions,
        *,
        streaming: bool,
        sink: Callable[[Event], None] | None,
    ) -> tuple[RunState, list[Message]]:
        refused = None if RUN_OPTIONS.issuperset(options) else refusal(self.name, options, agent)
        info = self._run_info(options)
        events = Dispatcher(
            [
                self._factory_handlers,
                list(self._instance_handlers),
                handler_list(options.get("on")),
            ],
            sink,
        )
        opening = self._opening(input, options, streaming)
        observers, observers_error = self._observers(options)
        saver, saver_error = self._saver(options, opening.config, info)
        state = RunState(
            info=info,
            config=opening.config,
            events=events,
            abort=AbortController(),
            messages=opening.messages,
            # The first thing that went wrong is the run's error.
            setup_error=refused or opening.error or observers_error or saver_error,
            saver=saver,
            observers=observers,
        )
        state.report.system_prompt = opening.system or None
        if options.get("parent") is None:
            # A nested run is a step of its parent's: the parent's resume re-runs it.
            try:
                state.journal, error = journal_for(self._durable_for(options), info, options)
            except TypeError as exc:
                error = InvalidOptionsError(f"invalid run options: {exc}")
            state.setup_error = state.setup_error or error
        _follow(state, options.get("signal"))
        return state, opening.user_input

    def _opening(self, input: Any, options: RunOptions, streaming: bool) -> _Opening:
        """The run's configuration and conversation, or why it cannot start."""
        try:
            config, system = self._config(options, streaming)
            messages: list[Message] = [SystemMessage(content=system)] if system else []
            history = options.get("history")
            user_input = run_input(input)
            if history is not None:
                given = as_messages(history, "history")
                check_answered(given, "history", after=user_input)
                messages.extend(given)
            check_answered(user_input, "input")
            return _Opening(config, system, messages, user_input)
        except Exception as exc:
            # execute() never raises: a run that cannot even start fails on its result.
            return _Opening(self._bare_config(streaming), "", [], [], _setup_error(exc))

    def _observers(self, options: RunOptions) -> tuple[tuple[Observer, ...], RaygentError | None]:
        """Who gets the run's report tree. Only a root run is observed: a nested run's
        report is in its root's tree."""
        if options.get("parent") is not None:
            return (), None
        try:
            return observers_for(self.observe, options.get("observe")), None
        except Exception as exc:
            return observers_for(self.observe, None), _setup_error(exc)

    def _saver(
        self, options: RunOptions, config: RunConfig, info: RunInfo
    ) -> tuple[RunSaver | None, RaygentError | None]:
        """Only a run given a session persists: a nested run reports its parent's session
        but is part of the parent's run (and must not wait for the parent's session)."""
        session_id = options.get("session_id")
        if self.memory is None or not session_id:
            return None, None
        try:
            scope = scope_of(session_id, options.get("user_id"), options.get("metadata"))
        except Exception as exc:
            return None, _setup_error(exc)
        persistence = config.backend.sessions
        saver = saver_for(
            self.memory,
            scope,
            persistence,
            info.run_id,
            config.scope.continues,
            recover=config.scope.recover,
        )
        return saver, None

    def _attachments(
        self, options: RunOptions
    ) -> tuple[Sequence[AttachmentLike] | None, AttachmentPolicy]:
        """The call's attachments and the policy they are loaded under."""
        policy = options.get("attachment_policy") or self.attachment_policy
        return options.get("attachments"), policy

    def _run_info(self, options: RunOptions) -> RunInfo:
        parent = options.get("parent")
        continues = inherited(options).continues
        # (16 random bytes as hex, as uuid4().hex but without building a UUID: per run)
        run_id = continued_run_id(continues) or options.get("run_id") or os.urandom(16).hex()
        return RunInfo(
            run_id=run_id,
            root_run_id=parent.root_run_id if parent else run_id,
            parent_run_id=parent.run_id if parent else None,
            session_id=options.get("session_id") or (parent.session_id if parent else None),
            agent_name=self.name,
            deps=options.get("deps", parent.deps if parent else None),
        )

    def plan_run(self, run_options: Mapping[str, Any]) -> RunPlan:
        """A run's first request and its stores, unsent (`raygent.seams.planned`)."""
        options = cast("RunOptions", run_options)
        model_options, system = self._asked(options, self._output_spec(options))
        request = first_request(f"agent {self.name!r}", self.model, model_options, system, options)
        cache = options.get("cache", self.cache)
        return RunPlan((request,), stores_of(self.memory, self._durable_for(options), cache))

    def _asked(self, options: RunOptions, output: OutputSpec | None) -> tuple[ModelOptions, str]:
        """The model options of the run's requests, and its system text."""
        merged = run_model_options(self.name, self.model, self.model_options, options)
        native = output is not None and self.model.capabilities.structured_output
        server = options.get("server_compaction")
        model_options = ModelOptions(
            **merged,
            server_compaction=server_compaction_for(
                self.server_compaction if server is None else server, self.model
            ),
            tools=self._tool_specs(options.get("tool_schemas") or self.tool_schemas),
            response_schema=output.response_schema() if native and output else None,
        )
        system = self._system_text(options)
        if output is not None and not native:
            system = f"{system}\n\n{output.instruction()}" if system else output.instruction()
        return model_options, system

    def _config(self, options: RunOptions, streaming: bool) -> tuple[RunConfig, str]:
        output = self._output_spec(options)
        model_options, system = self._asked(options, output)
        continuations = options.get("continue_on_output_limit")
        capture = options.get("capture_messages")
        guard = options.get("streaming_tool_guard")
        backend = self.backend or current_backend()
        scope = tenant_scope(inherited(options), options.get("tenant"), backend.tenants)
        config = RunConfig(
            model=self.model,
            backend=backend,
            ledgers=tuple(self._ledgers(options, scope)),
            scope=scope,
            tools=self.tools,
            options=model_options,
            output=output,
            repair=options.get("repair"),
            max_trips=self.max_trips,
            continue_on_output_limit=(
                self.continue_on_output_limit if continuations is None else continuations
            ),
            capture_messages=self.capture_messages if capture is None else capture,
            middleware=self.middleware,
            streaming=streaming,
            guard_max_buffer=self.guard_max_buffer if guard is None else guard_buffer(guard),
            version=self.version,
            compaction=self.compaction,
            approval_handler=options.get("approval_handler") or self.approval_handler,
            toolsets=self.toolsets,
            tool_schemas=options.get("tool_schemas") or self.tool_schemas,
            attachment_policy=options.get("attachment_policy") or self.attachment_policy,
            cache=_checked_cache(options.get("cache", self.cache)),
            tool_errors=tool_errors_setting(options.get("tool_errors") or self.tool_errors),
        )
        return config, system

    def _ledgers(self, options: RunOptions, scope: RunScope) -> list[BudgetLedger]:
        """The budgets this run is held to: the call's and the agent's (each a ledger of
        this run's own), and those of its scope: its job's, and run as a tool, its
        parent run's (shared)."""
        ledgers: list[BudgetLedger] = []
        for budget in (options.get("budget"), self.budget):
            if budget is not None:
                if not isinstance(budget, Budget):
                    raise TypeError("budget= takes raygent.Budget(...)")
                ledgers.append(LocalBudgetLedger(budget))
        for shared in scope.ledgers:
            if all(shared is not mine for mine in ledgers):
                ledgers.append(shared)
        return ledgers

    def _bare_config(self, streaming: bool) -> RunConfig:
        """The configuration of a run whose own options could not be resolved."""
        return RunConfig(
            model=self.model,
            backend=self.backend or current_backend(),
            tools=self.tools,
            options=ModelOptions(),
            output=None,
            repair=None,
            max_trips=self.max_trips,
            continue_on_output_limit=0,
            capture_messages=False,
            middleware=self.middleware,
            streaming=streaming,
            guard_max_buffer=None,
            version=self.version,
        )

    def _system_text(self, options: RunOptions) -> str:
        prompt = options.get("system_prompt") or self.system_prompt
        if prompt is None:
            return ""
        template = prompt if isinstance(prompt, SystemPrompt) else SystemPrompt(prompt)
        values = {**self.placeholders, **(options.get("placeholders") or {})}
        return template.render(values)

    def _output_spec(self, options: RunOptions) -> OutputSpec | None:
        output = options.get("output", self.output)
        if output is None:
            output = options.get("response_schema")
        if output is None:
            return None
        return self._output if output is self.output else OutputSpec(output)

    def _tool_specs(self, mode: str) -> tuple[ToolSpec, ...]:
        specs = self._specs.get(mode)
        if specs is None:
            compact = mode == "compact"
            specs = self._specs[mode] = tuple(t.spec(compact) for t in self.tools.values())
        return specs


def agent(
    name: str | None = None,
    *,
    model: Model | str,
    system_prompt: str | SystemPrompt | None = None,
    tools: Iterable[Tool[..., Any] | Agent | Executable | Toolset] = (),
    placeholders: Mapping[str, Any] | None = None,
    max_trips: int = 10,
    model_options: Mapping[str, Any] | None = None,
    output: Any = None,
    middleware: Iterable[Middleware] = (),
    on: Handlers | None = None,
    version: str | None = None,
    capture_messages: bool = False,
    observe: Observe = None,
    continue_on_output_limit: int = 0,
    tool_schemas: Literal["full", "compact"] = "full",
    streaming_tool_guard: GuardSetting = None,
    backend: Backend | None = None,
    memory: Memory | None = None,
    attachment_policy: AttachmentPolicy | None = None,
    compaction: Compaction | None = None,
    durable: Durable | None = None,
    approval_handler: ApprovalHandler | None = None,
    cache: ResponseCache | None = None,
    budget: Budget | None = None,
    tool_errors: Literal["continue", "fail"] = "continue",
    server_compaction: ServerCompactionSetting = None,
) -> Agent:
    """Build an agent. See `Agent.execute` for a run and `RunOptions` for per-call options.
    `model=` is an adapter or a name, `"gemini:gemini-2.5-flash"` (built from the
    environment as the provider's SDK is: `raygent.models.model_from_name`).

    `streaming_tool_guard=True` (or `{}`, or `{"max_buffer": n}`) turns tool-call JSON
    that a model writes as text into real tool calls; a call's `streaming_tool_guard=`
    overrides it (`False`: off for that call). `compaction=raygent.Compaction(...)`
    summarises older messages before a trip once the conversation counts above a
    threshold (see `raygent.compaction`). `observe=` says who gets each finished report
    tree (see `raygent.observers`); `on=` subscribes to events as the run goes.
    A `raygent.toolsets.Toolset` in `tools=` (an MCP server's, `raygent.mcp`) gives its
    tools when a run starts. `durable=raygent.Durable(store=...)` writes the run's state
    after every settled trip (see `Agent.resume`); `approval_handler=` answers tools that
    need approval in-process. `cache=raygent.ResponseCache(...)` answers a request the
    cache has seen from it, with no HTTP (a call's `cache=` overrides it; None: off).
    `budget=raygent.Budget(...)` holds each run to what it may spend (a call's `budget=`
    holds as well). `tool_errors="fail"` fails a run whose tool call fails (error
    `TOOL_EXECUTION`) instead of letting the model read the error and go on ("continue",
    the default; a call's `tool_errors=` overrides it). `server_compaction=True` (or
    `raygent.ServerCompaction(...)`) has the provider compact the context itself (see
    `raygent.ServerCompaction`; a model without the capability fails the run unsent).
    """
    return Agent(
        model=model,
        name=name,
        system_prompt=system_prompt,
        tools=tools,
        placeholders=placeholders,
        max_trips=max_trips,
        model_options=model_options,
        output=output,
        middleware=middleware,
        on=on,
        version=version,
        capture_messages=capture_messages,
        observe=observe,
        continue_on_output_limit=continue_on_output_limit,
        tool_schemas=tool_schemas,
        streaming_tool_guard=streaming_tool_guard,
        backend=backend,
        memory=memory,
        attachment_policy=attachment_policy,
        compaction=compaction,
        durable=durable,
        approval_handler=approval_handler,
        cache=cache,
        budget=budget,
        tool_errors=tool_errors,
        server_compaction=server_compaction,
    )


def _checked_cache(cache: Any) -> ResponseCache | None:
    if cache is not None and not isinstance(cache, ResponseCache):
        raise TypeError(f"cache= takes raygent.ResponseCache(...), not {type(cache).__name__}")
    return cache


def _anonymous_name(model: Model, tools: Mapping[str, Tool[..., Any]]) -> str:
    # The tools in the order given: `anon_openai_gpt-4o-mini_search+calc`.
    suffix = "+".join(tools)
    base = f"anon_{model.provider}_{model.name}"
    return f"{base}_{suffix}" if suffix else base


class _Opening(NamedTuple):
    """What a run starts from, or why it cannot start (`error`)."""

    config: RunConfig
    system: str
    messages: list[Message]
    user_input: list[Message]
    error: RaygentError | None = None


def _follow(state: RunState, signal: AbortSignal | None) -> None:
    """Abort the run when the caller's signal fires. Unlinked when the run ends: a
    long-lived signal must not keep runs alive."""
    if signal is not None:
        state.unlink = signal.add_callback(lambda: state.abort.abort(signal.reason))


def _adapted(item: Any) -> Tool[..., Any]:
    as_tool = getattr(item, "as_tool", None)
    if not callable(as_tool):
        raise TypeError(
            f"tools takes tools, agents, workflows and supervisors, not {type(item).__name__}"
        )
    made: Tool[..., Any] = as_tool()
    return made


def _setup_error(exc: Exception) -> RaygentError:
    if isinstance(exc, RaygentError):
        return exc
    return InvalidOptionsError(f"invalid run options: {type(exc).__name__}: {exc}")
