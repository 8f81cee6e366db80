"""What a call of an agent takes: `RunOptions` (the per-call options of `execute`,
`execute_sync`, `stream`, `resume`), and `SystemPrompt` (a prompt template)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from .._message_input import MessageLike
from ..abort import AbortSignal
from ..attachments import AttachmentLike, AttachmentPolicy
from ..budgets import Budget
from ..cache import ResponseCache
from ..durable.options import ApprovalHandler, Durable
from ..errors import CapabilityError, PromptError, RaygentError
from ..models._names import check_run_options
from ..models.contract import Model, ServerCompaction
from ..observers import Observe
from ..observers.events import Handlers
from ..run_context import RunInfo
from ..seams.attempt import RunScope
from ..seams.request import Tenant
from ._guard import GuardSetting
from .output import Repair

__all__ = ["RUN_OPTIONS", "RunOptions", "SystemPrompt", "refusal", "server_compaction_for"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class SystemPrompt:
    """A system prompt template with `{{name}}` placeholders; `from_file` reads once."""

    def __init__(self, template: str) -> None:
        self.template = template

    @classmethod
    def from_file(cls, path: str | Path) -> SystemPrompt:
        return cls(Path(path).read_text(encoding="utf-8"))

    def render(self, values: Mapping[str, Any]) -> str:
        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise PromptError(f"the system prompt needs a value for {{{{{name}}}}}")
            return str(values[name])

        return _PLACEHOLDER.sub(fill, self.template)


class RunOptions(TypedDict, total=False):
    """Per-call options of `execute`, `execute_sync` and `stream`."""

    history: Sequence[MessageLike] | None
    placeholders: Mapping[str, Any] | None
    output: Any
    response_schema: dict[str, Any] | None
    system_prompt: str | SystemPrompt | None
    repair: Repair | None
    signal: AbortSignal | None
    session_id: str | None
    user_id: str | None
    metadata: Mapping[str, str] | None
    model_options: Mapping[str, Any] | None
    continue_on_output_limit: int | None
    capture_messages: bool | None
    tool_schemas: Literal["full", "compact"] | None
    streaming_tool_guard: GuardSetting
    on: Handlers | None
    deps: Any
    parent: RunInfo | None
    # What the run inherits from where it runs: given by `raygent.batch` to each
    # attempt's run and by a run to the run its tool starts (not for callers).
    scope: RunScope | None
    attachments: Sequence[AttachmentLike] | None
    attachment_policy: AttachmentPolicy | None
    observe: Observe
    # Replies kept by request (`raygent.ResponseCache`); None: this call sends every trip.
    cache: ResponseCache | None
    # "fail": a failed tool call fails the run (TOOL_EXECUTION); "continue": the model
    # reads the error and goes on. None: the agent's `tool_errors=`.
    tool_errors: Literal["continue", "fail"] | None
    # What this run may spend (raygent.Budget); the agent's own `budget=` holds as well.
    budget: Budget | None
    # Who the run is for (raygent.Tenant, or the name of one registered with the
    # backend): its share of each endpoint by weight, its own budget and limits.
    tenant: Tenant | str | None
    # Durable runs (see raygent.Durable and Agent.resume).
    durable: Durable | None
    run_id: str | None
    approval_handler: ApprovalHandler | None
    resume: str | None
    # The provider compacts the context itself (raygent.ServerCompaction; True: its
    # defaults; False: off for this call). None: the agent's `server_compaction=`.
    server_compaction: bool | ServerCompaction | None


# The names a call takes (the TypedDict's keys, so they cannot drift): any other is
# refused before anything is sent.
RUN_OPTIONS: frozenset[str] = RunOptions.__optional_keys__ | RunOptions.__required_keys__

ServerCompactionSetting = bool | ServerCompaction | None


def refusal(agent: str, options: Mapping[str, Any], factory: Callable[..., Any]) -> RaygentError:
    """The error of a call to `agent` given a run option of an unknown name (a misspelt
    `output=` would run without its output type): the run fails unsent. A setting of
    the agent's own (a keyword of `factory`, `raygent.agent`) is said to be one."""

    def the_agent_s() -> dict[str, str]:
        return {
            name: f"{name} is the agent's: raygent.agent(..., {name}=...)"
            for name in inspect.signature(factory).parameters
            if name not in RUN_OPTIONS
        }

    try:
        check_run_options(
            options, RUN_OPTIONS, subject=f"a run of agent {agent!r}", elsewhere=the_agent_s
        )
    except RaygentError as exc:
        return exc
    raise AssertionError("an unknown run option was not refused")


def server_compaction_for(setting: object, model: Model) -> ServerCompaction | None:
    """The server-side compaction a run asks of `model`, refused (before any request)
    when the model has no such capability."""
    if setting is None or setting is False:
        return None
    spec = ServerCompaction() if setting is True else setting
    if not isinstance(spec, ServerCompaction):
        raise TypeError(
            f"server_compaction= takes True or raygent.ServerCompaction(...), not {setting!r}"
        )
    if not model.capabilities.server_compaction:
        raise CapabilityError(
            f"server_compaction: {model.provider} model {model.name!r} cannot compact its"
            " context on the provider's side (no server_compaction capability; Anthropic"
            " lists the models that can)",
            model=model.name,
            provider=model.provider,
            capability="server_compaction",
        )
    return spec
