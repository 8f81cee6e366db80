"""Session persistence on Ray: conversations served by a fixed pool of session hosts.

persistence  `RaySessions` (the `SessionPersistence` seam): routing runs to their host
host         `SessionHost`: the actor holding the leases and cached histories of many
             conversations
lease        `HostLease`: a run's lease on a session served by a host (writes go to the
             store, fenced by position: `raygent.backend.PositionFence`)
wire         what clients and hosts share: routing, the errors, messages as JSON

May import raygent, raygent.backend, raygent.stores, Ray and the shared helpers of
raygent.actors (`_options`, `_ray`); nothing of the other subpackages.
"""
