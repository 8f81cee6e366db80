"""Multi-node Ray with `ray.cluster_utils.Cluster`: tools placed by their resources, a
node removed under a running tool (idempotent: runs again elsewhere; not: a typed error
the model hears of), a node removed under a batch runner (every item ends once), a node
removed under runners holding slices of a provider bound (never passed; the slice comes
back).

The cluster runs in a subprocess (`_scenarios.py`, one cluster for all the scenarios):
it cannot share this process with the session's Ray (`ray_session`), whatever order
the tests run in. Its RAY_TMPDIR is private, so no `ray.init()` elsewhere on this
machine finds it and joins it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.slow("a multi-node cluster of its own, in a process of its own: ~40 s"),
]

SCRIPT = Path(__file__).resolve().parent / "_scenarios.py"
RUN_TIMEOUT = 240  # seconds; the run takes ~35 s here (7 s of it starting the head)


@pytest.fixture(scope="module")
def observed() -> Iterator[dict[str, Any]]:
    # Short: Ray's unix sockets live under it (a path may not exceed ~107 bytes).
    ray_tmp = tempfile.mkdtemp(prefix="rgc-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, RAYGENT_OFFLINE="1", RAYGENT_BACKEND="local")
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, (
            f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
        yield json.loads(lines[-1].removeprefix("RESULT "))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def scenario(observed: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = observed[name]
    assert "exception" not in found, found["exception"]
    return found


def test_tools_run_on_the_nodes_that_hold_their_resources(observed: dict[str, Any]) -> None:
    seen = scenario(observed, "placement")
    assert seen["status"] == "completed" and seen["text"] == "ok"
    assert seen["trips"] == 2
    calls = {call["name"]: call for call in seen["tool_calls"]}
    assert set(calls) == {"render", "query"}
    assert {call["trip"] for call in calls.values()} == {0}  # both asked for in one trip
    render, query = calls["render"]["output"], calls["query"]["output"]
    assert render["node"] == seen["gpu_node"]
    assert query["node"] == seen["db_node"]
    assert seen["head"] not in {render["node"], query["node"]}  # the head has no CPU
    assert render["resources"] == {"CPU": 1.0, "gpu_like": 1.0}
    assert query["resources"] == {"CPU": 1.0, "db": 1.0}
    assert seen["driver_pid"] not in {render["pid"], query["pid"]}


def test_an_idempotent_tool_runs_again_on_another_node_when_its_node_is_removed(
    observed: dict[str, Any],
) -> None:
    seen = scenario(observed, "idempotent_rerun")
    [removed] = seen["removed"]
    [other] = [node for node in seen["spot_nodes"] if node != removed]
    # Two attempts: the one on the removed node, then one on the other `spot` node.
    assert sorted(seen["attempts"]) == sorted([removed, other])
    assert seen["status"] == "completed"
    [record] = seen["tool_calls"]
    assert record["error"] is None
    assert record["output"]["node"] == other
    assert record["output"]["resources"] == {"CPU": 1.0, "spot": 1.0}
    # The model got the re-run's answer, and answered with it.
    assert seen["text"].startswith("the tool said: ") and other in seen["text"]


def test_a_tool_that_is_not_idempotent_fails_typed_when_its_node_is_removed(
    observed: dict[str, Any],
) -> None:
    seen = scenario(observed, "not_idempotent_fails")
    [removed] = seen["removed"]
    assert removed in seen["spot_nodes"] and len(seen["spot_nodes"]) == 2
    # Never re-run, although another node with `spot` was up and it declares retries.
    assert seen["attempts"] == [removed]
    [record] = seen["tool_calls"]
    assert record["output"] is None
    error = record["error"]
    assert error["type"] == "ToolExecutionError" and error["code"] == "TOOL_EXECUTION"
    assert error["cause"] == "NodeDiedError"
    assert error["tool"] == "charge" and error["call_id"]
    assert "its Ray node was lost" in error["message"] and "not retried" in error["message"]
    # Only the first sentence of Ray's text: no node address, no `ray` commands.
    assert "Node IP" not in error["message"] and "ray logs" not in error["message"]
    # The run went on: the model was told, and answered.
    assert seen["status"] == "completed" and seen["error"] is None
    assert seen["trips"] == 2
    assert seen["text"] == f"the tool said: Error: {error['message']}"


def test_an_idempotent_tool_fails_typed_when_its_retries_run_out_on_lost_nodes(
    observed: dict[str, Any],
) -> None:
    seen = scenario(observed, "retries_run_out")
    # Two attempts (1 run + 1 retry), each node removed under it; none on the third
    # `spot` node, which was up all along.
    assert len(seen["spot_nodes"]) == 3 and len(set(seen["removed"])) == 2
    assert sorted(seen["removed"]) == sorted(seen["attempts"])
    assert set(seen["removed"]) < set(seen["spot_nodes"])
    [record] = seen["tool_calls"]
    assert record["output"] is None
    error = record["error"]
    assert error["type"] == "ToolExecutionError" and error["cause"] == "NodeDiedError"
    assert "its Ray node was lost after 1 retries" in error["message"]
    assert seen["status"] == "completed"
    assert seen["text"] == f"the tool said: Error: {error['message']}"


def test_a_batch_loses_no_item_and_records_none_twice_when_a_runner_node_is_removed(
    observed: dict[str, Any],
) -> None:
    seen = scenario(observed, "batch_node_lost")
    removal = seen["removal"]
    assert removal is not None, "no item came back from a worker node's runner"
    removed = removal["removed"]
    assert removed != seen["head"]
    assert removal["done_before"] < seen["items"]  # removed mid-batch
    rows = seen["rows"]
    keys = Counter(row["key"] for row in rows)
    assert sorted(keys) == list(range(seen["items"])) and set(keys.values()) == {1}
    assert {row["status"] for row in rows} == {"completed"}
    assert seen["ok"] and seen["report"]["stopped"] is None
    assert seen["report"]["total"] == seen["report"]["succeeded"] == seen["items"]
    # The removed node's runner held items: they ran again, on a node still up.
    rerun = [row for row in rows if row["attempts"] >= 2]
    assert rerun and all(row["node"] != removed for row in rerun)
    assert seen["report"]["attempts"] == sum(row["attempts"] for row in rows)
    # The runners were spread over the nodes: some items did run on the removed node
    # before it went, others elsewhere.
    nodes = {row["node"] for row in rows}
    assert removed in nodes and len(nodes) >= 2


def test_a_node_with_lease_holders_removed_mid_batch_never_passes_the_bound(
    observed: dict[str, Any],
) -> None:
    seen = scenario(observed, "lease_holder_node_lost")
    assert seen["removed"].get("node"), "no runner node was removed"
    assert seen["removed"]["at_request"] < seen["items"]  # mid-batch
    assert seen["succeeded"] == seen["items"]
    assert seen["keys"] == list(range(seen["items"]))  # every item once
    assert seen["peak_after_removal"] <= seen["bound"]
    assert seen["bound_reached_again"]  # the lost slice came back to the others
