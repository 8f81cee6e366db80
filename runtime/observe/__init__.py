"""How runs are seen: events while a run goes, its result and report tree when it ends.

events        typed run events and the handlers subscribed to them (`on=`)
report        `AgentResult`, `AgentReport` and the trip and tool-call reports in it
observers     code that receives every finished report tree (`raygent.observers`)
_delivery     which observers see a run, and handing them its report
_otel         `OpenTelemetry`: report trees as spans
_html         notebook views of results, reports, batch and eval results

May import the base and compaction (a report records its compactions). The HTML views
name batch and eval results for the type checker only.
"""
