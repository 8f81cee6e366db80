"""The layout of runtime/ as a test: the part each module belongs to, and which way the
imports between parts point (README "Layout").

Every module of runtime/ is in one part. The subpackages are parts; the small shared
base and the entry points are top-level modules, named here one by one, so that a new
module is placed on purpose (a module in no part fails the test).

Which imports count, read from the source (ast), never by importing:
- run-time imports: at module level (the `else:` of `if TYPE_CHECKING:` included) and
  inside functions (an import that runs late still runs);
- `importlib.import_module("...")` with a literal name, as an import of that name;
- imports under `if TYPE_CHECKING:` never run. They let a protocol or a view name the
  types of a part above it (seams' `BatchPool` names batch's `Feed`, the HTML views name
  `BatchResult`), so they are left out of the order of parts, but they count for the
  hard rules: the base imports nothing above it, the agent never imports batch, and
  runtime/ imports neither Ray nor raygent.actors (outside the exceptions below).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"

# The base at the bottom. The model contract (`models/contract.py`: the `Model`
# protocol, options, responses, stream chunks, tool specs) is part of it: tools and every
# part above speak it, and it imports only the base; it stays beside the adapters that
# implement it.
BASE = {
    "_message_input",
    "_sync",
    "_version",
    "abort",
    "errors",
    "executable",
    "messages",
    "models.contract",
    "pricing",
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
    "compaction": "compaction",
    "data": "data",
    "flows": "flows",
    "mcp": "mcp",
    "memory": "memory",
    "models": "models",
    "observe": "observe",
    "sim": "sim",
}
TOP_LEVEL = {
    "backend": "seams",
    "seams": "seams",
    "_endpoint_bound": "seams",
    "observers": "observe",  # `raygent.observers`, the documented path
    "eval": "eval",
    "testing": "testing",
    "_flow_testing": "testing",  # the flow helpers `raygent.testing` re-exports
    "": "entry",  # raygent/__init__.py: the public API
    "__main__": "entry",
    "cli": "entry",
    "demo": "entry",
}
OUTSIDE = {"stores", "actors", "ray"}  # raygent.stores, raygent.actors, Ray itself

# Each part and the parts it may import (besides its own modules); bottom first.
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "sim": set(),  # the simulator plays the provider: it stands alone
    "models": {"base"},
    "memory": {"base", "stores"},
    "attachments": {"base", "models"},
    "seams": {"base", "memory"},
    "compaction": {"base", "memory"},
    "observe": {"base", "compaction"},
    "mcp": {"base", "models", "observe"},
    "agents": {
        "base",
        "models",
        "memory",
        "attachments",
        "compaction",
        "observe",
        "seams",
        "stores",
    },
    "flows": {"base", "models", "observe", "agents", "batch", "stores"},
    "batch": {"base", "seams", "agents", "observe"},
    "eval": {"base", "batch", "observe"},
    "data": {"base", "seams", "batch"},
    "testing": {"base", "observe", "flows"},
    "entry": {
        *("base", "sim", "models", "memory", "attachments", "seams", "compaction"),
        *("observe", "agents", "flows", "batch", "eval", "testing", "stores", "mcp"),
        "data",
    },
}

# The imports that cross a rule on purpose: (importer, part imported, kind) -> why.
EXCEPTIONS = {
    ("agents._agent", "eval", "function"): (
        "`agent.eval(cases, scorers)` (README) is public API: a hand-off to raygent.eval, "
        "imported when called, so an agent that is not evaluated never loads eval or batch"
    ),
    ("agents._agent", "batch", "type-checking"): (
        "the options of `Agent.eval` are batch's `BatchOptions`, named for the type checker"
    ),
    ("backend", "actors", "importlib"): "the Ray backend, imported on demand",
    ("backend", "actors", "type-checking"): "`init(options=RayOptions)`, for the type checker",
    ("data", "actors", "importlib"): (
        "`raygent.data.map` is a Ray Data stage: its actor pool lives in raygent.actors, "
        "imported when called"
    ),
    ("_batch.cli", "actors", "importlib"): (
        "`raygent batch` on Ray ships a target from the working directory by value"
    ),
}


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, dotted under runtime/ ("" is the root)
    path: Path
    line: int
    target: str  # what is imported: a runtime module, or "stores", "actors", "ray"
    kind: str  # "module", "function", "type-checking" or "importlib"

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(RUNTIME).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(RUNTIME.rglob("*.py"))}


def part_of(module: str) -> str | None:
    if module in OUTSIDE:
        return module
    if module in BASE:
        return "base"
    head = module.split(".")[0]
    if head in SUBPACKAGES:
        return SUBPACKAGES[head]
    return TOP_LEVEL.get(module)


def _absolute(name: str) -> str | None:
    """A runtime module (dotted under runtime/), an OUTSIDE name, or None (not ours)."""
    head, _, rest = name.partition(".")
    if head == "ray":
        return "ray"
    if head in ("stores", "actors"):
        return head
    if head in ("raygent", "runtime"):
        inner = rest.split(".")[0]
        return inner if inner in ("stores", "actors") else rest
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.AST, str]]:
    for child in ast.iter_child_nodes(node):
        inner = kind
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "type-checking" if kind == "type-checking" else "function"
        yield child, inner
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield statement, "type-checking"
                yield from _walk(statement, "type-checking")
            for statement in child.orelse:
                yield statement, inner
                yield from _walk(statement, inner)
        else:
            yield from _walk(child, inner)


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            found = _absolute(alias.name)
            if found is not None:
                yield found
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0:
            found = _absolute(node.module or "")
            if found is None:
                return
            if found in OUTSIDE:
                yield found
                return
            base = found.split(".") if found else []
        else:
            package = module.split(".") if module else []
            if not is_package:
                package = package[:-1]
            base = package[: len(package) - (node.level - 1)]
            base += node.module.split(".") if node.module else []
        for alias in node.names:
            submodule = ".".join([*base, alias.name])
            yield submodule if submodule in known else ".".join(base)
    elif isinstance(node, ast.Call):
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        first = node.args[0] if node.args else None
        if name == "import_module" and isinstance(first, ast.Constant):
            found = _absolute(str(first.value))
            if found is not None:
                yield found


def imports() -> list[Import]:
    modules = _modules()
    known = set(modules)
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node, kind in _walk(tree, "module"):
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
                continue
            for target in _targets(node, module, is_package, known):
                line = getattr(node, "lineno", 0)
                how = "importlib" if isinstance(node, ast.Call) else kind
                found.append(Import(module, path, line, target, how))
    return found


def _excepted(entry: Import) -> bool:
    return (entry.importer, part_of(entry.target), entry.kind) in EXCEPTIONS


def test_every_module_is_in_a_part() -> None:
    unplaced = [str(path.relative_to(ROOT)) for m, path in _modules().items() if not part_of(m)]
    assert not unplaced, f"not in any part of tests/test_layout.py (place them): {unplaced}"
    assert set(MAY_IMPORT) == {"base", *SUBPACKAGES.values(), *TOP_LEVEL.values()}


def test_the_parts_form_an_order() -> None:
    # No two parts may import each other, even through others: imports point one way.
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for part in MAY_IMPORT.get(start, set()) - seen:
            if part == goal or reaches(part, goal, seen | {part}):
                return True
        return False

    assert not [part for part in MAY_IMPORT if reaches(part, part, set())]


def test_imports_point_down() -> None:
    wrong = []
    for entry in imports():
        part, target = part_of(entry.importer), part_of(entry.target)
        assert part is not None and target is not None, entry
        if entry.kind == "type-checking" or target == part or _excepted(entry):
            continue
        if target not in MAY_IMPORT[part]:
            allowed = ", ".join(sorted(MAY_IMPORT[part])) or "nothing else"
            wrong.append(
                f"{entry.where} ({part}) imports {entry.target or 'raygent'} ({target}, "
                f"{entry.kind}): {part} may import {allowed}"
            )
    assert not wrong, "imports against the layout:\n" + "\n".join(wrong)


def _crossing(rule: str, importers: set[str], forbidden: set[str]) -> list[str]:
    wrong = []
    for entry in imports():
        target = part_of(entry.target)
        if part_of(entry.importer) in importers and target in forbidden and not _excepted(entry):
            wrong.append(f"{entry.where} imports {entry.target} ({entry.kind}): {rule}")
    return wrong


def test_the_base_imports_nothing_above_it() -> None:
    above = {part for part in MAY_IMPORT if part != "base"} | OUTSIDE
    wrong = _crossing("the base imports only the base", {"base"}, above)
    assert not wrong, "\n".join(wrong)


def test_the_agent_never_imports_batch() -> None:
    wrong = _crossing("batch runs agents, never the other way round", {"agents"}, {"batch"})
    assert not wrong, "\n".join(wrong)


def test_runtime_imports_neither_ray_nor_the_ray_backend() -> None:
    # The core runs with no Ray at all; the Ray backend (actors/) plugs in through the
    # seams, imported on demand by the backend (test_conventions checks Ray imports too).
    rule = "runtime/ never imports Ray, and reaches raygent.actors only through backend"
    wrong = _crossing(rule, set(MAY_IMPORT), {"ray", "actors"})
    assert not wrong, "\n".join(wrong)


def test_every_exception_is_still_needed() -> None:
    used = {(e.importer, part_of(e.target), e.kind) for e in imports()}
    assert set(EXCEPTIONS) <= used, set(EXCEPTIONS) - used


def test_every_subpackage_says_what_it_holds_and_may_import() -> None:
    for init in sorted(RUNTIME.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        says = "may import" in doc.lower() or "imports nothing" in doc.lower()
        assert doc and says, f"{init.relative_to(ROOT)}: what lives here, what it may import"
