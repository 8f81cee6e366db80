"""cluster.yaml installs this raygent, from the checkout it mounts, with this Ray."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import yaml

import raygent

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "cluster.yaml").read_text())


def _mount_of_the_checkout() -> str:
    mounts = {remote: local for remote, local in CONFIG["file_mounts"].items()}
    remote = [r for r, local in mounts.items() if Path(local) == Path(".")]
    assert remote, f"no file_mounts entry mounts the checkout ('.'): {mounts}"
    return remote[0]


def _install_command() -> list[str]:
    installs = [c for c in CONFIG["setup_commands"] if "pip install" in c]
    assert len(installs) == 1, installs
    return shlex.split(installs[0])


def test_the_setup_installs_the_mounted_checkout_and_the_drivers_ray() -> None:
    words = _install_command()
    assert _mount_of_the_checkout() in words  # this checkout, not a name on an index
    assert "raygent" not in words and "--upgrade" not in words
    assert f"ray[default]=={ray.__version__}" in words


@pytest.mark.slow("a fresh venv with Ray installed in it: ~40 s")
def test_the_setup_command_gives_a_python_that_imports_this_raygent(tmp_path: Path) -> None:
    # The setup command as a node runs it: HOME holds the mount (a copy of the checkout's
    # tracked files), a fresh venv stands for the node's Python.
    home = tmp_path / "home"
    mount = home / _mount_of_the_checkout().removeprefix("~/")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in listed:
        target = mount / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    venv = tmp_path / "node"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    words = [os.path.expanduser(w) if w.startswith("~") else w for w in _install_command()]
    words = [str(mount) if w == os.path.expanduser(_mount_of_the_checkout()) else w for w in words]
    assert words[:4] == ["python3", "-m", "pip", "install"], words
    env = {**os.environ, "HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env = {**env, "PYTHONNOUSERSITE": "1"}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *words[4:]],
        check=True,
        env=env,
        timeout=600,
    )
    probe = (
        "import importlib.metadata as m, raygent, ray;"
        "print(raygent.__version__, ray.__version__, raygent.__file__,"
        " [e.value for e in m.entry_points(group='raygent.backends')])"
    )
    shown = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout.split(maxsplit=3)
    assert shown[0] == raygent.__version__ and shown[1] == ray.__version__
    assert shown[2].startswith(str(venv))  # installed, not the checkout on a path
    assert "raygent.actors:PLUGIN" in shown[3]
