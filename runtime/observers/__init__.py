"""How runs are seen: events while a run goes, its result and report tree when it ends,
and the observers that receive finished report trees (`raygent.observers`, public).

events        typed run events and the handlers subscribed to them (`on=`)
report        `AgentResult`, `AgentReport` and the trip and tool-call reports in it, and
              their notebook views (`_repr_html_`)
_registry     code that receives every finished report tree: `add`, `observe_all`
delivery      which observers see a run, and handing them its report (the core's)
otel          `OpenTelemetry`: report trees as spans and GenAI metrics, in the
              OpenTelemetry GenAI conventions' names; `RequestRecord`, one request
views         the HTML pieces of the notebook views (report, batch and eval build on them)

May import the base and compaction (a report records its compactions).
"""

from ._registry import (
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
