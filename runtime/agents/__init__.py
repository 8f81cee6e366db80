"""The agent: `raygent.agent(...)`, its run options, and everything one run does.

_agent        the factory, `Agent`, `AgentStream`, `RunOptions`, `SystemPrompt`
_start        a run: its attachments loaded, then the loop
_loop         trips and tool rounds until a final answer, each step its own function
_trip         one model trip (`_compact` before it, the streaming tool guard `_guard` in it)
_tool_round   the tool calls of one trip
_state        the mutable state of one run
output        structured output and repair; fallback: `fallback_model`; middleware
session       `agent.session(...)`: a stored conversation the agent runs in
_agent_tool   an agent used as a tool (a nested run)

May import the base, models, memory, attachments, compaction, observe, seams and backend;
never batch (batch runs agents, not the other way round). The one hand-off upwards is
`Agent.eval`, which imports `raygent.eval` when called (tests/test_layout.py).
"""

from ._agent import Agent, AgentStream, RunOptions, SystemPrompt, agent
from ._guard import StreamingToolGuard

__all__ = ["Agent", "AgentStream", "RunOptions", "StreamingToolGuard", "SystemPrompt", "agent"]
