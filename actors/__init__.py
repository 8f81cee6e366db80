"""The Ray backend: model gateways and tool tasks (session hosts and batch runners next).

Build it with `raygent.init(backend="ray")`, or `ray_backend(RayOptions(...))` for more
control; the core in `raygent` never imports Ray.
"""

from ._gateway_actor import Gateway, GatewayLimits, RetryPolicy, StreamBatching
from ._options import RayOptions
from .backend import connect, ray_backend
from .gateway import RayModelAccess, gateway_key, gateway_names
from .tool_tasks import RayToolExecution

__all__ = [
    "Gateway",
    "GatewayLimits",
    "RayModelAccess",
    "RayOptions",
    "RayToolExecution",
    "RetryPolicy",
    "StreamBatching",
    "connect",
    "gateway_key",
    "gateway_names",
    "ray_backend",
]
