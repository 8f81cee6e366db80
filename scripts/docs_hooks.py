"""mkdocs hook: lay out the package as installed, for mkdocstrings to read.

pyproject.toml maps three folders into one package (`runtime/` is `raygent`, `actors/`
`raygent.actors`, `stores/` `raygent.stores`); the editable install is an import hook
that griffe cannot follow. As `scripts/typecheck.py` does for mypy, this builds
`build/docs-tree/raygent/` out of links to the repository's own files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "docs-tree"


def _link_tree() -> None:
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "raygent"
    package.mkdir(parents=True)
    for entry in (ROOT / "runtime").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in ("actors", "stores"):
        (package / folder).symlink_to(ROOT / folder)


# At import: mkdocs loads hooks while it reads the config, before mkdocstrings starts.
_link_tree()
