"""`raygent batch MODULE:AGENT INPUT -o OUTPUT` as a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from batch_support import raygent_cli, read_jsonl, write_jsonl

from raygent.cli import main


def test_the_cli_runs_an_agent_over_a_file(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": f"hi {n}", "id": n} for n in range(20)])
    sink = tmp_path / "out.jsonl"
    proc = raygent_cli(
        "batch",
        "tests.batch.batch_support:echo_agent",
        str(source),
        "-o",
        str(sink),
        "--concurrency",
        "4",
        "--retries",
        "1",
        "--backend",
        "local",
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "20 items: 20 completed, 0 failed, 0 cancelled" in err
    records = sorted(read_jsonl(sink), key=lambda r: r["index"])
    assert [r["data"] for r in records] == [f"HI {n}" for n in range(20)]
    assert [r["key"] for r in records] == list(range(20))


def test_the_cli_exits_1_when_items_fail(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"n": n} for n in range(4)])
    sink = tmp_path / "out.parquet"
    proc = raygent_cli(
        "batch", "tests.batch.batch_support:fails_on_odd", str(source), "-o", str(sink)
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "2 completed, 2 failed" in err and "ValueError x2" in err
    assert sink.is_dir()


def test_the_cli_reports_bad_targets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    out = str(tmp_path / "out.jsonl")
    assert main(["batch", "no_such_module_here:agent", str(source), "-o", out]) == 2
    assert "No module named" in capsys.readouterr().err
    assert main(["batch", "missing-colon", str(source), "-o", out]) == 2
    assert "MODULE:AGENT" in capsys.readouterr().err
    assert main(["batch", "batch_support:echo_agent", str(tmp_path / "nope.jsonl"), "-o", out]) == 2
    assert "no such input" in capsys.readouterr().err


@pytest.mark.timeout(240)
def test_the_cli_on_ray_ships_a_module_the_workers_cannot_import(tmp_path: Path) -> None:
    # The module lives only in the working directory, which Ray's workers do not have on
    # their path: it must travel by value to the batch runners.
    (tmp_path / "my_agents.py").write_text(
        "from ray._private import worker\n"
        "if worker.global_worker.mode == worker.WORKER_MODE:  # as on another machine\n"
        "    raise ImportError('my_agents exists only where the driver runs')\n"
        "import raygent\n"
        "from raygent.testing import FunctionModel, reply\n\n"
        "def shout(messages, options):\n"
        "    return reply(messages[-1].text.upper())\n\n"
        "loud = raygent.agent(model=FunctionModel(shout))\n"
    )
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": f"hi {n}", "id": n} for n in range(12)])
    sink = tmp_path / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    proc = raygent_cli(
        "batch",
        "my_agents:loud",
        str(source),
        "-o",
        str(sink),
        "--backend",
        "ray",
        cwd=tmp_path,
        env={**env, "RAYGENT_BACKEND": "ray"},
    )
    _, err = proc.communicate(timeout=220)
    assert proc.returncode == 0, err  # 1, "the batch failed: ... cannot load", if not shipped
    assert "12 items: 12 completed, 0 failed, 0 cancelled" in err
    records = sorted(read_jsonl(sink), key=lambda r: r["index"])
    assert [r["data"] for r in records] == [f"HI {n}" for n in range(12)]


def test_the_cli_refuses_a_negative_budget_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    out = tmp_path / "out.jsonl"
    code = main(
        ["batch", "tests.batch.batch_support:echo_agent", str(source), "-o", str(out)]
        + ["--budget-usd", "-1", "--backend", "local"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err == "raygent batch: Budget(usd=...) cannot be negative, got -1.0\n"
    assert not out.exists()
