"""The Ray backend: model gateways, tool executors and tasks, session hosts, batch runners.

Build it with `raygent.init(backend="ray")`, or `ray_backend(RayOptions(...))` for more
control; the core in `raygent` never imports Ray, nor this package: it finds `PLUGIN`
through the entry-point group `raygent.backends` (pyproject.toml).

plugin     `ray_backend`, `connect`, `ship_by_value` and `PLUGIN` (what the core loads):
           the four seams below put together
gateway/   model access's counters: the detached gateway actors holding provider
           bounds, their ledgers, the processes' leases, a request's admission in them
tools/     tool execution: inline, on the per-node tool executors, or as Ray tasks
sessions/  session persistence: the session hosts, the runs' leases, the wire form
batch/     batch execution: the runner actors, the driver's runner pool, the Ray Data stage
_options   `RayOptions` (and the core's `RetryPolicy`);  `_ray`: small Ray glue

May import, of the core: `raygent` (the public API), `raygent.backend` (the backend
contract) and `raygent.stores`; nothing else (tests/test_layout.py). The subpackages
import the shared helpers and never each other, except batch, which uses sessions;
`plugin` imports them all, and nothing here imports `plugin`.
"""

from . import _quiet  # noqa: F401  (first: Ray imported without its notebook noise)
from ._options import RayOptions, RetryPolicy
from .gateway.access import RayModelAccess, endpoint_digest, gateway_key, gateway_names
from .gateway.actor import Gateway
from .gateway.endpoint_ledger import Bounds
from .plugin import PLUGIN, connect, ray_backend, ship_by_value
from .sessions.persistence import LeaseExpiredError, RaySessions, SessionHostError
from .tools.execution import RayToolExecution

__all__ = [
    "PLUGIN",
    "Bounds",
    "Gateway",
    "LeaseExpiredError",
    "RayModelAccess",
    "RayOptions",
    "RaySessions",
    "RayToolExecution",
    "RetryPolicy",
    "SessionHostError",
    "connect",
    "endpoint_digest",
    "gateway_key",
    "gateway_names",
    "ray_backend",
    "ship_by_value",
]
