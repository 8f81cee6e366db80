"""Type-check raygent as users import it: `python scripts/typecheck.py [mypy args]`.

mypy names a module by its folder (`runtime/abort.py` would be `runtime.abort`) and cannot
follow setuptools' mapping of `runtime/` to `raygent` (the editable install is an import
hook). So this lays out a link tree, `build/typecheck/raygent/`, whose entries are links
to the repository's own files and folders (`actors` and `stores` inside it, as installed),
and runs mypy on the package `raygent` there. Every file checked is the file in the
repository; only the path mypy reports goes through the tree, and is printed back as the
repository's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
# The import name of each folder (pyproject's [tool.setuptools] package-dir).
FOLDERS = {"runtime": "raygent", "actors": "raygent/actors", "stores": "raygent/stores"}


def link_tree() -> Path:
    """Lay the tree out anew (a module added or removed since shows at once)."""
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "raygent"
    package.mkdir(parents=True)
    for entry in (ROOT / "runtime").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in ("actors", "stores"):
        (package / folder).symlink_to(ROOT / folder)
    return TREE


def _to_repository(line: str) -> str:
    rest = line
    for folder, name in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        if rest.startswith(name + "/"):
            return folder + rest[len(name) :]
    return line


def main(argv: list[str]) -> int:
    tree = link_tree()
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or "mypy"
    env = {**os.environ, "MYPYPATH": str(tree)}
    # Run from inside the tree, so that the folders themselves (runtime/ as a package
    # named `runtime`) are not on mypy's path; the configuration stays pyproject's.
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    cache = ["--cache-dir", str(ROOT / ".mypy_cache")]
    result = subprocess.run(
        [mypy, *config, *cache, "-p", "raygent", *argv],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in (result.stdout + result.stderr).splitlines():
        print(_to_repository(line))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
