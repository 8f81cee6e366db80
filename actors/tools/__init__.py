"""Tool execution on Ray: inline, on the tool executors of the caller's node, or as tasks.

execution      `RayToolExecution` (the `ToolExecution` seam): where each tool call runs
executor       `ToolExecutor`: the process (an actor) that runs many tool calls at once
executor_pool  `ToolExecutors`: the per-node pool of executors and the calls sent to them
tasks          `ToolTasks`: a tool that needs placement runs each call as a Ray task
outcomes       what a remote tool call comes back as (a value, a failure, a typed error)

May import raygent, raygent.backend, raygent.stores, Ray and the shared helpers of
raygent.actors (`_options`, `_ray`); nothing of the other subpackages.
"""
