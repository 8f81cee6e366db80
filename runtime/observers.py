"""`raygent.observers`, the documented path: code that receives every completed run's
report tree. Defined in `raygent.observe.observers` (its docstring tells the whole story).
"""

from .observe.observers import Observe, Observer, OpenTelemetry, Registration, add, registered

__all__ = ["Observe", "Observer", "OpenTelemetry", "Registration", "add", "registered"]
