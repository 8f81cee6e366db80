"""Batches on Ray: runner actors keep the attempts in flight; the driver feeds them.

execution   `RayBatchRunners` (the `BatchExecution` seam) and `RunnerPool`: the driver's
            side, feeding runners, recording items, replacing runners that die
runner      `BatchRunner`: the runner actor, the in-flight core of a batch
line_relay  provider_batch=: the runners' lines to the job's pool in the driver, and back
sizing      how many runners a batch uses, and its concurrency split among them
data_stage  `raygent.data.map` on Ray Data: a `map_batches` stage over an actor pool

May import raygent, raygent.backend, raygent.stores, Ray (and Ray Data: `data_stage`
only), the shared helpers of raygent.actors (`_options`, `_ray`) and
`sessions` (a store the runners can share); never `plugin`: the backend the runners
run with is handed to `RayBatchRunners`.
"""
