"""What `import raygent` costs a new process (every Ray worker, session host, batch
runner, Ray Data actor and CLI call pays it), against the interpreter alone and against
raygent's own irreducible dependencies (httpx and pydantic).

Each case is a fresh `python -c ...` process; the cases alternate run by run over
`--rounds` so that a change in the machine's speed falls on all of them alike; the
median wall time of each is reported, and which of the clients a process may never use
(redis-py, aiohttp, jsonschema, psycopg, mcp, ray) `import raygent` loads.

    python benchmarks/bench_import.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "interpreter (python -c pass)": "pass",
    "import httpx, pydantic (baseline)": "import httpx, pydantic",
    "import raygent": "import raygent",
}
HEAVY = ["redis", "aiohttp", "httpx_aiohttp", "jsonschema", "psycopg", "mcp", "ray"]
LOADED = (
    "import sys, json, raygent;"
    f" print(json.dumps([m for m in {HEAVY!r} if sys.modules.get(m) is not None]))"
)


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for code in CASES.values():
        wall(code)  # warm the OS's file cache
    times: dict[str, list[float]] = {name: [] for name in CASES}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, code in CASES.items():
            times[name].append(wall(code))
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(f"\nwall time of a new process, median of {args.rounds} alternating runs")
    print(f"load (1-minute average) at the start and end: {load:.1f} {os.getloadavg()[0]:.1f}\n")
    for name, ms in median.items():
        spread = sorted(v * 1000 for v in times[name])
        print(f"{name:36} {ms:7.0f} ms   ({spread[0]:.0f}-{spread[-1]:.0f})")
    base = median["import httpx, pydantic (baseline)"]
    print(f"\nimport raygent over the baseline: {median['import raygent'] - base:.0f} ms")
    out = subprocess.run([sys.executable, "-c", LOADED], check=True, capture_output=True)
    loaded = json.loads(out.stdout)
    print(f"clients loaded by import raygent: {', '.join(loaded) if loaded else 'none'}")
    print("\nreproduce: python benchmarks/bench_import.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
