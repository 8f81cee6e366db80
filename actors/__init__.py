"""The Ray backend: session hosts, model gateways, tool tasks, batch runners.

Filled in by the Ray backend issue; the core in `raygent` never imports Ray.
"""
