"""The agent: `raygent.agent(...)`, its run options, and everything one run does.

_agent        the factory, `Agent` (its `as_tool`: an agent as a tool, a nested run)
_options      `RunOptions` (per-call options), `SystemPrompt`
_stream       `AgentStream`; session: `Session` (`agent.session(...)`); both take the
              agent as a Protocol of what they use
_start        a run: its attachments loaded, then the loop
_loop         trips and tool rounds until a final answer; _next_step: what a reply means
_state        the mutable state of one run (`RunState`, `Progress`), and `JournalWriter`:
              the Protocol of the journal a durable run writes to
_journal      what a durable run's header, entries and outcome hold (on the skeleton of
              `raygent.durable.journal`); _resume: resuming it; _durable_api:
              `Agent.resume` / `stream_resume` / `abandon`; _approval: who waits;
              _retry_resume: a batch retry continues its failed attempt
_trip         one model trip (`_compact` before it, the streaming tool guard `_guard` in it)
_tool_round   the tool calls of one trip; _toolsets: an MCP server's tools listed
output        structured output and repair; fallback: `fallback_model`; middleware

`Durable`, `Approve`, `Deny` are `raygent.durable`'s (re-exported here), and so are the
journal skeleton and the scope a run lives under (`raygent.durable.scope`).

May import the base, models, memory, attachments, seams, compaction, observers, durable,
and the stores (durable runs keep their state in them); batch only for its option types
(TYPE_CHECKING) and eval only from `Agent.eval`, when called. Never flows, data or
testing (flows run agents, not the other way round).
"""

from ..durable.options import Approve, Deny, Durable
from ._agent import Agent, agent
from ._guard import StreamingToolGuard
from ._options import RunOptions, SystemPrompt
from ._stream import AgentStream

__all__ = [
    "Agent",
    "AgentStream",
    "Approve",
    "Deny",
    "Durable",
    "RunOptions",
    "StreamingToolGuard",
    "SystemPrompt",
    "agent",
]
