"""`raygent demo`, the README's first command, runs end to end and says what it is."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param("ray", marks=pytest.mark.slow("starts a fresh Ray, as `raygent demo` does")),
    ],
)
def test_demo_runs_the_bundled_dataset_and_says_the_model_is_the_simulator(
    backend: str, tmp_path: Path
) -> None:
    env = {**os.environ, "RAYGENT_OFFLINE": "1", "RAYGENT_BACKEND": backend}
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "raygent", "demo", "--latency-ms", "5", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "SIMULATOR, not a real LLM" in text
    assert f"backend: {backend}" in text
    assert "500 questions from 100 travellers" in text
    # What runs: 64 runs at once, whose requests the provider's bound of 32 admits.
    assert "64 runs at a time, their requests held to the provider's bound of 32" in text
    assert "500/500 done" in text  # progress, as lines when there is no terminal
    assert "summary: 500/500 completed, 0 failed" in text
    assert "cost $" in text
    peak = re.search(r"peak (\d+) requests in flight \(bound (\d+)\)", text)
    assert peak is not None and 0 < int(peak[1]) <= int(peak[2])
    assert "OPENAI_API_KEY" in text  # how to point it at a real provider
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(row["key"] for row in rows) == [f"q{i:03d}" for i in range(1, 501)]
    assert all(row["status"] == "completed" and row["data"]["city"] for row in rows)
    assert "traveller-001 holds 20 messages" in text  # five questions, four messages each
    assert (out / "sessions.db").exists()
    assert f"writing to {out}" in text  # it says where it writes
    assert "Token authentication" not in result.stderr  # nor Ray's start-up lines


def test_the_demo_writes_under_a_new_temporary_folder_by_default(tmp_path: Path) -> None:
    env = {**os.environ, "RAYGENT_OFFLINE": "1", "RAYGENT_BACKEND": "local"}
    result = subprocess.run(
        [sys.executable, "-m", "raygent", "demo", "--latency-ms", "0", "--items", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    said = re.search(r"writing to (\S+) ", result.stdout)
    assert said is not None, result.stdout
    folder = Path(said[1])
    assert (folder / "results.jsonl").exists() and folder.parent != tmp_path
    assert list(tmp_path.iterdir()) == []  # nothing left in the working directory
    shutil.rmtree(folder)


@pytest.mark.timeout(300)
@pytest.mark.slow("starts a fresh Ray")
def test_ray_start_up_lines_show_when_asked(tmp_path: Path) -> None:
    # The demo's test above holds that a Ray raygent starts keeps its start-up lines
    # (INFO, the token-authentication warning) out of the output; RAYGENT_RAY_LOGS=1
    # shows them, as the manual says (getting-started, on a cluster).
    script = "import ray, raygent\nraygent.init('ray')\nprint('connected')\nray.shutdown()\n"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=280,
        env={**env, "RAYGENT_RAY_LOGS": "1"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "connected"
    assert "INFO" in result.stderr, result.stderr


def test_the_demo_speaks_gemini_when_asked(tmp_path: Path) -> None:
    env = {**os.environ, "RAYGENT_OFFLINE": "1", "RAYGENT_BACKEND": "local"}
    out = tmp_path / "demo"
    flags = ["--provider", "gemini", "--items", "40", "--latency-ms", "5", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "raygent", "demo", *flags],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "summary: 40/40 completed, 0 failed" in result.stdout
    assert "The same agent on the Gemini wire: completed" in result.stdout
    assert "GEMINI_API_KEY" in result.stdout
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and all(row["data"]["city"] for row in rows)
