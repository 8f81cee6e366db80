"""`raygent.memory`: where a session's conversation is kept, and when a run saves to it.

_fence        `PositionFence`: the session position a lease's run writes at, and the writes
              that move it (one mechanism for every lease: local, Ray session hosts)
_save         `Memory` (a store and a save policy), `RunSaver` applying the policy to a run
_sessions     session persistence: the lease a run holds on a session, the seam the Ray
              session hosts implement, and `LocalSessions` in this process

The stores are in raygent.stores; `Session` (`agent.session(...)`) is the agent's.
May import the base and raygent.stores.
"""

from ._fence import PositionFence
from ._save import Memory, RunSaver, SavePolicy
from ._sessions import LocalSessions, SessionLease, SessionPersistence

__all__ = [
    "LocalSessions",
    "Memory",
    "PositionFence",
    "RunSaver",
    "SavePolicy",
    "SessionLease",
    "SessionPersistence",
]
