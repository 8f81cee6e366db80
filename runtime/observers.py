"""`raygent.observers`, the documented path: code that receives completed runs' report
trees. Defined in `raygent.observe.observers` (its docstring tells the whole story).
"""

from .observe.observers import (
    Observe,
    ObserveAll,
    Observer,
    OpenTelemetry,
    Registration,
    add,
    observe_all,
    observing_all,
    registered,
)

__all__ = [
    "Observe",
    "ObserveAll",
    "Observer",
    "OpenTelemetry",
    "Registration",
    "add",
    "observe_all",
    "observing_all",
    "registered",
]
