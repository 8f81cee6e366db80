"""`raygent demo`, the README's first command, runs end to end and says what it is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_demo_runs_and_says_the_model_is_the_simulator(backend: str) -> None:
    env = {**os.environ, "RAYGENT_OFFLINE": "1", "RAYGENT_BACKEND": backend}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [sys.executable, "-m", "raygent", "demo", "--latency-ms", "0"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "SIMULATOR, not a real LLM" in out
    assert f"backend: {backend}" in out
    assert "summary: 12/12 completed" in out
    assert "cost $" in out
    assert "OPENAI_API_KEY" in out  # how to point it at a real provider
