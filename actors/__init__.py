"""The Ray backend: model gateways, tool tasks and session hosts (batch runners next).

Build it with `raygent.init(backend="ray")`, or `ray_backend(RayOptions(...))` for more
control; the core in `raygent` never imports Ray.
"""

from ._gateway_actor import Gateway, GatewayLimits, RetryPolicy, StreamBatching
from ._options import RayOptions
from .backend import connect, ray_backend, ship_by_value
from .gateway import RayModelAccess, gateway_key, gateway_names
from .sessions import LeaseExpiredError, RaySessions, SessionHostError
from .tool_tasks import RayToolExecution

__all__ = [
    "Gateway",
    "GatewayLimits",
    "LeaseExpiredError",
    "RayModelAccess",
    "RayOptions",
    "RaySessions",
    "RayToolExecution",
    "RetryPolicy",
    "SessionHostError",
    "StreamBatching",
    "connect",
    "gateway_key",
    "gateway_names",
    "ray_backend",
    "ship_by_value",
]
