"""Multi-node scenarios on a real `ray.cluster_utils.Cluster`, one cluster per process.

A Cluster cannot share a process with the test session's Ray (`ray_session`), so the
tests run this script in a subprocess: `python _scenarios.py [name ...]`. It starts one
cluster (a head with no CPU, worker nodes with custom resources), runs the scenarios
one after another on it (adding nodes as they are removed), and prints one line,
`RESULT {json}`, with what each scenario observed; the tests assert on it.

Set RAY_TMPDIR to a short private folder: Ray writes the cluster's address there
(`ray_current_cluster`), where any `ray.init()` without an address on this machine would
otherwise find it and try to join.

Nothing here sleeps to synchronise: a tool says where it runs by writing a file named
after its node, the driver waits (with a deadline) for that file, removes the node, then
writes the file that releases the tool on the nodes that remain.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import raygent
from raygent._batch import BatchItem, batch
from raygent.actors import RayOptions, ray_backend
from raygent.actors.batch import execution as batch_runners
from raygent.messages import Message, ToolMessage
from raygent.seams.contract import Backend
from raygent.testing import FunctionModel, ScriptedModel, call, reply

NAMESPACE = "raygent-cluster-tests"
DEADLINE = 60.0  # seconds any wait here may take before it counts as a failure
CPU_PER_NODE = 1


def node_id() -> str:
    return str(ray.get_runtime_context().get_node_id())


def wait_for(check: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """Poll `check` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: nothing after {timeout:g}s")
        time.sleep(0.02)
    return found


async def wait_for_async(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: nothing after {DEADLINE:g}s")
        await asyncio.sleep(0.02)
    return found


# --- tools (defined in __main__: they travel to the workers by value) -------------------


def _where(tool: str) -> dict[str, Any]:
    context = ray.get_runtime_context()
    return {
        "tool": tool,
        "node": node_id(),
        "pid": os.getpid(),
        "resources": context.get_assigned_resources(),
    }


@raygent.tool(resources={"gpu_like": 1})
def render(frame: int) -> dict[str, Any]:
    """Render one frame (needs the gpu_like node).

    Args:
        frame: the frame number.
    """
    return {**_where("render"), "frame": frame}


@raygent.tool(resources={"db": 1})
def query(sql: str) -> dict[str, Any]:
    """Run a query (needs the db node).

    Args:
        sql: the query.
    """
    return {**_where("query"), "sql": sql}


def _hold(folder: str, tool: str) -> dict[str, Any]:
    """Say where this attempt runs (a file named after its node), then wait until the
    driver releases this node (it never releases the node it removes)."""
    here = _where(tool)
    Path(folder, f"started-{here['node']}-{here['pid']}").write_text(tool)
    release = Path(folder, f"release-{here['node']}")
    deadline = time.monotonic() + DEADLINE
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tool} on {here['node']} was never released")
        time.sleep(0.02)
    return here


@raygent.tool(resources={"spot": 1}, idempotent=True, retries=2)
def crunch(folder: str) -> dict[str, Any]:
    """A long idempotent computation (safe to run again from the start).

    Args:
        folder: where to say where it runs.
    """
    return _hold(folder, "crunch")


@raygent.tool(resources={"spot": 1}, idempotent=True, retries=1)
def crunch_once(folder: str) -> dict[str, Any]:
    """An idempotent computation that may run twice at most.

    Args:
        folder: where to say where it runs.
    """
    return _hold(folder, "crunch_once")


@raygent.tool(resources={"spot": 1}, retries=2)
def charge(folder: str) -> dict[str, Any]:
    """A payment: not idempotent, so never re-run (its `retries` do not apply).

    Args:
        folder: where to say where it runs.
    """
    return _hold(folder, "charge")


# --- the cluster ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lab:
    """The cluster, the driver's connection and the backend the scenarios share."""

    def __init__(self) -> None:
        # Not 6379 (Redis's port, Ray's default); no dashboard (it only slows start-up).
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "gcs_server_port": free_port(),
                "num_cpus": 0,
                "include_dashboard": False,
            },
        )
        self.head = self.cluster.head_node.node_id
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False)
        self.backend: Backend = ray_backend(RayOptions(namespace=NAMESPACE))
        self.nodes: dict[str, Any] = {}  # node id -> cluster_utils node, workers only
        self.spot: set[str] = set()  # the nodes with the `spot` resource

    def add(self, **resources: float) -> str:
        node = self.cluster.add_node(num_cpus=CPU_PER_NODE, resources=resources)
        self.cluster.wait_for_nodes()  # placed on before anything is scheduled (SPREAD sees it)
        self.nodes[node.node_id] = node
        if "spot" in resources:
            self.spot.add(node.node_id)
        return str(node.node_id)

    def spot_nodes(self, count: int) -> list[str]:
        """At least `count` live nodes with `spot` (adding what is missing)."""
        while len(self.spot) < count:
            self.add(spot=1)
        return sorted(self.spot)

    def remove(self, node: str) -> float:
        """Remove a worker node (all its processes); the seconds it took."""
        clock = time.monotonic()
        self.cluster.remove_node(self.nodes.pop(node))
        self.spot.discard(node)
        return time.monotonic() - clock

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


def tool_calls(result: raygent.AgentResult) -> list[dict[str, Any]]:
    return [
        {
            "name": record.name,
            "trip": record.trip_index,
            "output": None if record.output is None else json.loads(record.output),
            "error": record.error,
        }
        for record in result.report.tool_calls
    ]


def summary(result: raygent.AgentResult) -> dict[str, Any]:
    return {
        "status": result.report.status,
        "text": result.text,
        "error": None if result.error is None else str(result.error),
        "trips": len(result.report.trips),
        "tool_calls": tool_calls(result),
    }


# --- scenarios --------------------------------------------------------------------------


async def placement(lab: Lab, work: Path) -> dict[str, Any]:
    """Tools go to the nodes that have their resources; one trip calls both."""
    gpu = lab.add(gpu_like=1, spot=1)
    db = lab.add(db=1, spot=1)
    model = ScriptedModel(
        [reply(tool_calls=[call("render", {"frame": 7}), call("query", {"sql": "select 1"})]), "ok"]
    )
    bot = raygent.agent(model=model, tools=[render, query], backend=lab.backend)
    result = await bot.execute("render and query")
    return {
        "head": lab.head,
        "gpu_node": gpu,
        "db_node": db,
        "driver_pid": os.getpid(),
        **summary(result),
    }


def _answer_with_what_the_tool_said(tool: str) -> FunctionModel:
    """Calls `tool` once, then answers with the tool result it was given, verbatim."""

    def step(messages: list[Message], options: Any) -> Any:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"the tool said: {last.text}"
        return reply(tool_calls=[call(tool, {"folder": FOLDER[tool]})])

    return FunctionModel(step)


FOLDER: dict[str, str] = {}


async def _lose_nodes_under(
    lab: Lab, work: Path, tool: raygent.Tool[..., Any], removals: int = 1
) -> dict[str, Any]:
    """Run an agent that calls `tool` (resources spot=1); each time an attempt of the
    tool has started, remove its node (`removals` times); then release the tool on
    every node left. There is one node with `spot` more than the removals: one where a
    further attempt could run."""
    folder = work / tool.name
    folder.mkdir()
    FOLDER[tool.name] = str(folder)
    spot_nodes = lab.spot_nodes(removals + 1)
    bot = raygent.agent(
        model=_answer_with_what_the_tool_said(tool.name), tools=[tool], backend=lab.backend
    )
    clock = time.monotonic()
    run = asyncio.ensure_future(bot.execute("go"))

    def started() -> list[str]:
        return [p.name.split("-")[1] for p in sorted(folder.glob("started-*"))]

    removed: list[str] = []
    timings: list[dict[str, float]] = []
    for _ in range(removals):
        fresh = await wait_for_async(
            lambda: [node for node in started() if node not in removed],
            f"no new attempt of {tool.name} started",
        )
        removed.append(fresh[0])
        started_after = time.monotonic() - clock
        seconds = await asyncio.to_thread(lab.remove, fresh[0])
        timings.append({"started_after": round(started_after, 2), "remove": round(seconds, 2)})
    for node in lab.nodes:  # every node but the ones just removed
        (folder / f"release-{node}").write_text("go")
    released_at = time.monotonic()
    result = await asyncio.wait_for(run, DEADLINE)
    return {
        "spot_nodes": spot_nodes,
        "removed": removed,
        "attempts": started(),
        "timings": timings,
        "seconds_from_release_to_answer": round(time.monotonic() - released_at, 2),
        **summary(result),
    }


async def idempotent_rerun(lab: Lab, work: Path) -> dict[str, Any]:
    """An idempotent tool whose node is removed mid-call runs again on another node."""
    return await _lose_nodes_under(lab, work, crunch)


async def not_idempotent_fails(lab: Lab, work: Path) -> dict[str, Any]:
    """A tool that is not idempotent whose node is removed mid-call: a typed error for
    the model, never a second run."""
    return await _lose_nodes_under(lab, work, charge)


async def retries_run_out(lab: Lab, work: Path) -> dict[str, Any]:
    """An idempotent tool with one retry loses the node of each attempt: a typed error
    once its retries are spent (though a third node could have run it)."""
    return await _lose_nodes_under(lab, work, crunch_once, removals=1 + crunch_once.retries)


class OnBackend:
    """An async callable bound to a backend (as an agent is), for `batch`."""

    def __init__(self, backend: Backend, fn: Callable[[Any], Awaitable[Any]]) -> None:
        self.backend = backend
        self.fn = fn

    async def __call__(self, item: Any) -> Any:
        return await self.fn(item)


async def where_item_runs(item: int) -> dict[str, Any]:
    await asyncio.sleep(0.25)  # the work: an I/O wait
    return {"item": item, "node": node_id(), "pid": os.getpid()}


async def batch_node_lost(lab: Lab, work: Path) -> dict[str, Any]:
    """A batch whose runners are spread over the nodes; the node of one runner is
    removed mid-batch: every item still ends once, the lost ones run again elsewhere."""
    lab.add()
    lab.add()  # with the head, three nodes for three runners
    items, sink = 60, work / "batch.jsonl"
    seen: dict[str, int] = {}
    chosen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def watch(item: BatchItem) -> None:
        if not item.ok:
            return
        node = item.data["node"]
        seen[node] = seen.get(node, 0) + 1
        # A worker node whose runner has already given back a few items.
        if not chosen.done() and node in lab.nodes and seen[node] >= 3:
            chosen.set_result(node)

    async def remove_when_chosen() -> dict[str, Any]:
        node = await chosen
        done_before = sum(seen.values())
        seconds = await asyncio.to_thread(lab.remove, node)
        return {"removed": node, "done_before": done_before, "seconds_to_remove": seconds}

    remover = asyncio.ensure_future(remove_when_chosen())
    clock = time.monotonic()
    result = await batch(
        OnBackend(lab.backend, where_item_runs),
        range(items),
        concurrency=6,
        runners=3,
        sink=sink,
        on_item=watch,
    )
    elapsed = time.monotonic() - clock
    removal = await asyncio.wait_for(remover, 1) if chosen.done() else None
    remover.cancel()
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    return {
        "head": lab.head,
        "workers_left": sorted(lab.nodes),
        "items": items,
        "removal": removal,
        "ok": result.ok,
        "seconds": round(elapsed, 2),
        "report": result.report.model_dump(include={"total", "succeeded", "attempts", "stopped"}),
        "rows": [
            {
                "key": row["key"],
                "status": row["status"],
                "attempts": row["attempts"],
                "node": (row.get("data") or {}).get("node"),
            }
            for row in rows
        ],
    }


def _node_of(actor: Any) -> str:
    return node_id()


async def lease_holder_node_lost(lab: Lab, work: Path) -> dict[str, Any]:
    """A batch of an agent whose runners hold slices of the provider's bound on worker
    nodes; the node of one is removed mid-batch: every item ends once, the bound is never
    passed, and the lost slice comes back (its lease times out) for the others to use."""
    from raygent.sim import Latency, serve

    while len(lab.nodes) < 2:
        lab.add()
    bound, items, ttl = 6, 120, 2.0
    backend = ray_backend(RayOptions(namespace=NAMESPACE, lease_ttl=ttl))
    async with serve(latency=Latency(fixed_ms=150)) as sim:
        model = raygent.OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-cluster", max_concurrency=bound
        )
        bot = raygent.agent(model=model, backend=backend)
        removed: dict[str, Any] = {}
        after: dict[str, int] = {"peak": 0}

        async def remove_one() -> None:
            await sim.wait_until(lambda s: s.requests >= 20, DEADLINE)
            # The nodes this driver's runners run on (each asked where it is).
            handles = [h for hs in batch_runners._fleet._runners.values() for h in hs]
            nodes = await asyncio.gather(*(h.__ray_call__.remote(_node_of) for h in handles))
            node = next(n for n in lab.nodes if n in nodes)
            removed["node"] = node
            removed["seconds"] = await asyncio.to_thread(lab.remove, node)
            removed["at_request"] = sim.stats().requests
            sim.reset()
            await sim.wait_until(lambda s: s.in_flight == bound, DEADLINE)
            after["peak"] = bound  # the whole bound in flight again, without the lost node

        remover = asyncio.ensure_future(remove_one())
        result = await batch(bot, [f"q{i}" for i in range(items)], concurrency=24, runners=2)
        await asyncio.wait_for(remover, DEADLINE)
        stats = sim.stats()
    return {
        "items": items,
        "bound": bound,
        "succeeded": result.report.succeeded,
        "keys": sorted(item.key for item in result.items),
        "removed": removed,
        "peak_after_removal": stats.peak_in_flight,
        "bound_reached_again": after["peak"] == bound,
    }


SCENARIOS: dict[str, Callable[[Lab, Path], Awaitable[dict[str, Any]]]] = {
    "placement": placement,
    "idempotent_rerun": idempotent_rerun,
    "not_idempotent_fails": not_idempotent_fails,
    "retries_run_out": retries_run_out,
    "batch_node_lost": batch_node_lost,
    "lease_holder_node_lost": lease_holder_node_lost,
}


async def run(lab: Lab, names: list[str], work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        clock = time.monotonic()
        try:
            out[name] = await SCENARIOS[name](lab, work)
        except Exception:
            out[name] = {"exception": traceback.format_exc()}
        out[name]["scenario_seconds"] = round(time.monotonic() - clock, 2)
    return out


def main(argv: list[str]) -> None:
    if not os.environ.get("RAY_TMPDIR"):
        raise SystemExit("set RAY_TMPDIR to a private folder (see the module docstring)")
    names = argv or list(SCENARIOS)
    work = Path(os.environ["RAY_TMPDIR"]) / "work"
    work.mkdir(parents=True, exist_ok=True)
    clock = time.monotonic()
    lab = Lab()
    out: dict[str, Any] = {"cluster_start_seconds": round(time.monotonic() - clock, 2)}
    try:
        out.update(asyncio.run(run(lab, names, work)))
    finally:
        clock = time.monotonic()
        lab.close()
        out["cluster_stop_seconds"] = round(time.monotonic() - clock, 2)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
