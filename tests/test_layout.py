"""The layout of the package as a test: the part each module belongs to, which way the
imports between parts point, and what each folder may reach (docs/layout.md).

Three folders make one package: `runtime/` is `raygent` (the core), `actors/` is
`raygent.actors` (the Ray backend), `stores/` is `raygent.stores`. Every module is in one
part. The subpackages of the core are parts; its flat modules are the base or an entry
point, named here one by one, so that a new module is placed on purpose.

Every static import counts, read from the source (ast), never by importing: at module
level, inside functions, under `if TYPE_CHECKING:`, and `importlib.import_module("...")`
with a literal name. The rules:
- imports between parts point down (`MAY_IMPORT`), and no circle of modules spans two
  parts; inside a part, no two modules import each other (they would be one module);
- an import names the package (`raygent.…` or relative), never a folder (`runtime.…`);
- a part reaches another part through its public surface (its `__init__` or a module
  without a leading underscore), never through a private module; the base's underscore
  modules are the core's shared helpers, for the core only;
- `actors/` imports `raygent`, `raygent.backend` (the backend contract) and
  `raygent.stores`, nothing else of the core; `stores/` imports only the base; the core
  never names `actors/` (the Ray backend is found through an entry point);
- `runtime/` keeps at most 20 top-level modules.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"runtime": "raygent", "actors": "raygent.actors", "stores": "raygent.stores"}
MAX_TOP_LEVEL = 20

# The base at the bottom: the flat modules every part builds on. The model contract
# (`models/contract.py`: the `Model` protocol, options, replies, stream chunks, tool
# specs) is part of it; it stays beside the adapters that implement it, and so does the
# rule every part refuses an unknown option name with (`models/_names.py`: the adapters
# refuse unknown settings with it, and the model options it knows are the contract's).
BASE = {
    "_message_input",
    "_sync",
    "_version",
    "abort",
    "errors",
    "executable",
    "messages",
    "models._names",
    "models.contract",
    "pricing",
    "rates.limits",
    "redaction",
    "run_context",
    "tools",
    "toolsets",
    "usage",
}
SUBPACKAGES = {
    "_batch": "batch",
    "agents": "agents",
    "attachments": "attachments",
    "cache": "cache",
    "compaction": "compaction",
    "data": "data",
    "durable": "durable",
    "flows": "flows",
    "mcp": "mcp",
    "memory": "memory",
    "models": "models",
    "observers": "observers",
    "seams": "seams",
    "sim": "sim",
    "budgets": "budgets",
    "rates": "rates",
}
TOP_LEVEL = {
    "eval": "eval",
    "testing": "testing",
    "backend": "contract",  # raygent.backend: what a backend may use of the core
    "": "entry",  # raygent/__init__.py: the public API
    "__main__": "entry",
    "cli": "entry",
    "demo": "entry",
}

# Each part and the parts it may import (besides its own modules); bottom first.
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "sim": set(),  # the simulator plays the provider: it stands alone
    "stores": {"base"},
    "models": {"base"},
    # Rates: pure arithmetic over the base (the base's `rates.limits` is their reading).
    "rates": {"base"},
    "budgets": {"base", "rates"},  # beside the model contract, below the seams
    "memory": {"base", "stores"},
    "attachments": {"base", "models"},
    "seams": {"base", "memory", "budgets", "rates"},
    # The response cache wraps the seams' model access and keeps replies in the stores.
    "cache": {"base", "seams", "stores"},
    "compaction": {"base", "memory", "seams", "stores"},
    "observers": {"base", "compaction"},
    "mcp": {"base", "models", "observers"},
    "durable": {"base", "memory", "observers", "stores"},
    # The stores: a job's check makes a round trip through the stores its runs use, and
    # a route keeps its timings there.
    "batch": {"base", "models", "seams", "observers", "durable", "cache", "budgets", "stores"},
    "eval": {"base", "batch", "observers"},
    "agents": {
        *("base", "models", "memory", "attachments", "compaction", "observers"),
        *("seams", "durable", "stores", "eval", "batch", "cache", "budgets"),
    },
    "flows": {"base", "models", "observers", "seams", "durable", "agents", "stores"},
    "data": {"base", "seams", "batch"},
    "testing": {"base", "models", "observers", "flows"},
    "contract": {
        *("base", "models", "memory", "seams", "observers", "durable", "batch"),
        *("agents", "stores", "budgets", "rates"),
    },
    "entry": {
        *("base", "sim", "models", "memory", "attachments", "seams", "compaction"),
        *("observers", "mcp", "durable", "batch", "eval", "agents", "flows", "data"),
        *("testing", "stores", "cache", "budgets", "rates"),
    },
    # The Ray backend: the public API, the backend contract and the stores, nothing else.
    "actors": {"entry", "contract", "stores"},
}
# What actors/ may import of the core, module by module (the rule above, spelled out).
ACTORS_REACH = {"raygent", "raygent.backend", "raygent.stores"}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name ("raygent.agents._loop")
    path: Path
    line: int
    target: str  # the module imported (a submodule when one is named, else its package)
    written: str  # how the import names it (a folder name shows here)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _module_name(folder: str, path: Path) -> str:
    parts = path.relative_to(ROOT / folder).with_suffix("").parts
    inner = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join([FOLDERS[folder], *inner])


@functools.cache
def modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[_module_name(folder, path)] = path
    return found


def part_of(module: str) -> str | None:
    if module == "raygent.actors" or module.startswith("raygent.actors."):
        return "actors"
    if module == "raygent.stores" or module.startswith("raygent.stores."):
        return "stores"
    inner = module.removeprefix("raygent").removeprefix(".")
    if inner in BASE:
        return "base"
    head = inner.split(".")[0]
    if head in SUBPACKAGES:
        return SUBPACKAGES[head]
    return TOP_LEVEL.get(inner)


def _part_root(module: str) -> str:
    """The module a part is reached through: its package, or the flat module itself."""
    for root in ("raygent.actors", "raygent.stores"):
        if module == root or module.startswith(root + "."):
            return root
    inner = module.removeprefix("raygent").removeprefix(".")
    head = inner.split(".")[0]
    if head in SUBPACKAGES and inner not in BASE:
        return f"raygent.{head}"
    return module


def is_private(module: str) -> bool:
    """A module below its part's root whose name (or a package's) has a leading `_`."""
    rest = module[len(_part_root(module)) :].lstrip(".")
    return any(piece.startswith("_") for piece in rest.split(".") if piece)


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    head = name.split(".")[0]
    if head in FOLDERS:  # a folder named as if it were the package
        name = FOLDERS[head] + name[len(head) :]
    if name != "raygent" and not name.startswith("raygent."):
        return None
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _targets(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    known = modules()
    if isinstance(node, ast.Import):
        for alias in node.names:
            found = _resolve(alias.name, known)
            if found is not None:
                yield found, alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0:
            base, written = node.module or "", node.module or ""
        else:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([node.module] if node.module else [])])
            written = base
        for alias in node.names:
            found = _resolve(f"{base}.{alias.name}", known)
            if found is not None:
                yield found, written
    elif isinstance(node, ast.Call):
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        first = node.args[0] if node.args else None
        if name == "import_module" and isinstance(first, ast.Constant):
            found = _resolve(str(first.value), known)
            if found is not None:
                yield found, str(first.value)


@functools.cache
def imports() -> tuple[Import, ...]:
    found = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
                continue
            for target, written in _targets(node, module, path.name == "__init__.py"):
                if target != module:
                    line = getattr(node, "lineno", 0)
                    found.append(Import(module, path, line, target, written))
    return tuple(found)


def circles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module."""
    graph: dict[str, set[str]] = defaultdict(set)
    for entry in imports():
        graph[entry.importer].add(entry.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's, iterative (no recursion limit to meet)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(modules()):
        if module not in index:
            visit(module)
    return found


def top_level_modules() -> list[Path]:
    return sorted((ROOT / "runtime").glob("*.py"))


def folder_named_imports() -> list[Import]:
    return [e for e in imports() if e.written.split(".")[0] in FOLDERS]


def test_every_module_is_in_a_part() -> None:
    unplaced = [str(p.relative_to(ROOT)) for m, p in modules().items() if not part_of(m)]
    assert not unplaced, f"not in any part of tests/test_layout.py (place them): {unplaced}"
    parts = {"base", "actors", "stores", *SUBPACKAGES.values(), *TOP_LEVEL.values()}
    assert set(MAY_IMPORT) == parts


def test_the_parts_form_an_order() -> None:
    # No two parts may import each other, even through others: imports point one way.
    def reaches(start: str, goal: str, seen: frozenset[str]) -> bool:
        return any(
            part == goal or reaches(part, goal, seen | {part})
            for part in MAY_IMPORT.get(start, set()) - seen
        )

    assert not [part for part in MAY_IMPORT if reaches(part, part, frozenset())]


def test_imports_point_down() -> None:
    wrong = []
    for entry in imports():
        part, target = part_of(entry.importer), part_of(entry.target)
        assert part is not None and target is not None, entry
        if target != part and target not in MAY_IMPORT[part]:
            allowed = ", ".join(sorted(MAY_IMPORT[part])) or "nothing else"
            wrong.append(
                f"{entry.where} ({part}) imports {entry.target} ({target}): "
                f"{part} may import {allowed}"
            )
    assert not wrong, "imports against the layout:\n" + "\n".join(wrong)


def test_no_import_circle_anywhere() -> None:
    # Across parts a circle would undo the order; inside a part two modules that import
    # each other are one thing split in two.
    assert not circles(), "\n".join(" <-> ".join(c) for c in circles())


def test_every_import_names_the_package_never_a_folder() -> None:
    wrong = [f"{e.where}: {e.written}" for e in folder_named_imports()]
    assert not wrong, "\n".join(wrong)
    shims = [m for m in modules() if m.rsplit(".", 1)[-1] == "_core"]
    assert not shims, shims


def test_no_part_reaches_into_another_parts_private_module() -> None:
    wrong = []
    for entry in imports():
        part, target = part_of(entry.importer), part_of(entry.target)
        if part == target or not is_private(entry.target):
            continue
        core_helper = target == "base" and part not in ("actors", "stores")
        if not core_helper:
            wrong.append(f"{entry.where} ({part}) imports {entry.target}, private to {target}")
    assert not wrong, "\n".join(wrong)


def test_the_ray_backend_uses_only_the_public_api_and_the_backend_contract() -> None:
    wrong = [
        f"{e.where} imports {e.target}"
        for e in imports()
        if part_of(e.importer) == "actors"
        and part_of(e.target) != "actors"
        and _part_root(e.target) not in ACTORS_REACH
        and e.target not in ACTORS_REACH
    ]
    assert not wrong, "actors/ may import raygent, raygent.backend, raygent.stores:\n" + (
        "\n".join(wrong)
    )


def test_the_core_never_names_ray_or_the_ray_backend() -> None:
    wrong = []
    for module, path in modules().items():
        if part_of(module) == "actors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("raygent.actors") else []
            for name in names:
                if name == "ray" or name.startswith(("ray.", "raygent.actors", "actors")):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} names {name}")
    assert not wrong, "\n".join(wrong)


def test_runtime_keeps_few_top_level_modules(capsys: pytest.CaptureFixture[str]) -> None:
    count = len(top_level_modules())
    with capsys.disabled():
        print(
            f"\nlayout: circles across parts {_circles_across_parts()}, "
            f"circles inside parts {len(circles()) - _circles_across_parts()}, "
            f"folder-named imports {len(folder_named_imports())}, "
            f"top-level modules {count} (at most {MAX_TOP_LEVEL})"
        )
    assert count <= MAX_TOP_LEVEL, [p.name for p in top_level_modules()]


def _circles_across_parts() -> int:
    return sum(1 for c in circles() if len({part_of(m) for m in c}) > 1)


def test_every_subpackage_says_what_it_holds_and_may_import() -> None:
    for folder in FOLDERS:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            if init.parent == ROOT / "runtime":
                continue
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            says = "may import" in doc.lower() or "imports nothing" in doc.lower()
            assert doc and says, f"{init.relative_to(ROOT)}: what lives here, what it may import"
