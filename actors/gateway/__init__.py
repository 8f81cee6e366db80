"""Model access on Ray: provider bounds held cluster-wide by model gateways.

access     `RayModelAccess` (the `ModelAccess` seam): the core's access layer over
           `RayAdmissions`, this process's leases (HTTP from the process that runs the
           agent, inside a leased slice of the endpoint's bound); gateway names and keys
actor      `Gateway`: the detached gateway actor that owns the bounds and leases slices
endpoint_ledger  one endpoint's bound as its gateway keeps it (`EndpointLedger`,
           `Bounds`): plain Python
rate_budget  one key's rate limits as its gateway keeps them (`RateBudget`): smooth
           buckets granted in pieces, learnt from the replies: plain Python
lease      `EndpointLease`: a process's lease on one endpoint's bound (or one model's
           rate), admitting requests
sends      admitting one request inside the leases (a slot, then its rate budget)
budgets    `RayBudgets` (the `budgets` seam): a job's budget kept by the gateway
budget_book   one job's budget as its gateway keeps it (`BudgetBook`): plain Python
budget_lease  `BudgetLease`: a process's lease on a job's budget, reserving requests
tenants    `RayTenants` (the `tenants` seam): tenants registered cluster-wide in the gateway

May import raygent, raygent.backend, raygent.stores, Ray and the shared helpers of
raygent.actors (`_options`, `_ray`); nothing of the other subpackages.
"""
