"""The README stays true: its test command is what CI runs, and its Python blocks run on
the default Ray backend too (tests/test_docs.py runs them, and the manual's, in-process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(.*?)```", README, re.DOTALL)
    test_command = next(c.strip() for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()


@pytest.mark.timeout(300)
@pytest.mark.slow("starts a fresh Ray, as a reader without one does")
def test_the_readme_blocks_run_on_the_default_ray_backend_too(tmp_path: Path) -> None:
    # What a reader gets without RAYGENT_BACKEND: Ray, started by the first block that
    # needs it (one Ray for every block: they run one after another in one process).
    paths = []
    for index, block in enumerate(BLOCKS):
        path = tmp_path / f"readme_block_{index}.py"
        path.write_text(block)
        paths.append(str(path))
    runner = tmp_path / "run_all.py"
    runner.write_text(
        "import runpy, sys\n"
        "for path in sys.argv[1:]:\n"
        "    print(f'== {path}', flush=True)\n"
        "    runpy.run_path(path, run_name='__main__')\n"
        "import raygent\n"
        "print('backend:', raygent.current_backend().name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAYGENT_BACKEND", "RAY_ADDRESS")}
    result = subprocess.run(
        [sys.executable, str(runner), *paths],
        cwd=tmp_path,
        env={**env, "RAYGENT_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "backend: ray" in result.stdout
    outputs = result.stdout.split("== ")[1:]
    assert len(outputs) == len(BLOCKS)
    for index, output in enumerate(outputs):
        for expected in re.findall(r"print\(.*\)\s+#\s*(.+)$", BLOCKS[index], re.MULTILINE):
            assert expected.strip() in output, (index, expected)
