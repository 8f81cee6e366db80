"""The agent: `raygent.agent(...)`, its run options, and everything one run does.

_agent        the factory, `Agent`, `RunOptions`, `SystemPrompt`; _stream: `AgentStream`
_start        a run: its attachments loaded, then the loop
_loop         trips and tool rounds until a final answer; _steps: what a reply means
durable       `Durable`, `Approve`, `Deny`: durable runs and tool approval
_journal      a durable run's state in the store; _resume: resuming it; _durable_api:
              `Agent.resume` / `stream_resume` / `abandon`; _approval: who waits
_trip         one model trip (`_compact` before it, the streaming tool guard `_guard` in it)
_tool_round   the tool calls of one trip
_state        the mutable state of one run
output        structured output and repair; fallback: `fallback_model`; middleware
session       `agent.session(...)`: a stored conversation the agent runs in
_agent_tool   an agent used as a tool (a nested run)

May import the base, models, memory, attachments, compaction, observe, seams, backend and
the stores (durable runs keep their state in them);
never batch (batch runs agents, not the other way round). The one hand-off upwards is
`Agent.eval`, which imports `raygent.eval` when called (tests/test_layout.py).
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
