"""The Ray backend: model gateways, tool executors and tasks, session hosts, batch runners.

Build it with `raygent.init(backend="ray")`, or `ray_backend(RayOptions(...))` for more
control; the core in `raygent` never imports Ray, nor this package: it finds `PLUGIN`
through the entry-point group `raygent.backends` (pyproject.toml).

Imports of the core: `raygent` (the public API), `raygent.backend` (the backend
contract) and `raygent.stores`; nothing else (tests/test_layout.py).
"""

from ._gateway_actor import Gateway
from ._ledger import Bounds
from ._options import RayOptions
from ._sends import RetryPolicy
from .backend import PLUGIN, connect, ray_backend, ship_by_value
from .gateway import RayModelAccess, endpoint_digest, gateway_key, gateway_names
from .sessions import LeaseExpiredError, RaySessions, SessionHostError
from .tools import RayToolExecution

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
