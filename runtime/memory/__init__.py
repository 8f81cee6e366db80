"""`raygent.memory`: where a session's conversation is kept, and when a run saves to it.

_fence        `PositionFence`: the session position a lease's run writes at, and the writes
              that move it (one mechanism for every lease: local, Ray session hosts)
_memory       `Memory` (a store and a save policy), `SavePolicy`
save          `RunSaver`: the save policy applied to one run; `default_memory`
hold          `SessionHold`: a durable run holds its session until it ends
_sessions     session persistence: the lease a run holds on a session, the seam the Ray
              session hosts implement, and `LocalSessions` in this process

The stores are in raygent.stores; `Session` (`agent.session(...)`) is the agent's; the
scope a session lives under (`scope_of`) is `raygent.durable.scope`'s.
May import the base and raygent.stores.
"""

from ._fence import PositionFence
from ._memory import Memory, SavePolicy
from ._sessions import LocalSessions, SessionLease, SessionPersistence
from .save import RunSaver

__all__ = [
    "LocalSessions",
    "Memory",
    "PositionFence",
    "RunSaver",
    "SavePolicy",
    "SessionLease",
    "SessionPersistence",
]
