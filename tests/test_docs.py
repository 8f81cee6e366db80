"""The README and the manual stay true: every Python block runs, the site builds strictly.

Each page's ```python blocks run in order, in one namespace, in one fresh process (in a
temporary working directory, `RAYGENT_OFFLINE=1`), and every `print(...)  # what it
prints` comment is a promise the block's output must hold. A block is left unrun only
when the line before it says so in the page itself: `<!-- not run: the reason -->`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
README_MAX_LINES = 320

BLOCK = re.compile(
    r"(?:<!-- not run: (?P<why>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL
)
PROMISE = re.compile(r"print\(.*\)\s+#\s*(.+)$", re.MULTILINE)
# A block that uses Ray itself (`ray.data`): its page's process joins the test session's
# Ray (RAY_ADDRESS) instead of starting one of its own (~20 s here), as a reader's script
# joins the cluster it runs on. Starting a fresh Ray is what tests/test_readme.py and
# tests/notebook/test_first_use.py hold.
USES_RAY = re.compile(r"^\s*(import ray\b|from ray\b)", re.MULTILINE)
# The runner: each block of the page in order, in one namespace, with a marker before
# each so that the test can cut the output per block.
RUNNER = """\
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for index, code in blocks:
    print(f"\\n==raygent-doc-block {index}==", flush=True)
    print(f"\\n==raygent-doc-block {index}==", file=sys.stderr, flush=True)
    try:
        exec(compile(code, f"<block {index}>", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"\\n==raygent-doc-failed {index}==", flush=True)
        sys.exit(1)
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Block:
    index: int
    code: str
    not_run: str | None  # the page's reason, when it says the block is not run


def blocks_of(page: Path) -> list[Block]:
    return [Block(i, m["code"], m["why"]) for i, m in enumerate(BLOCK.finditer(page.read_text()))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


CASES = [(page, block.index) for page in PAGES for block in blocks_of(page)]


@dataclass
class PageRun:
    returncode: int
    outputs: dict[int, str]  # block index -> what it printed
    errors: dict[int, str]  # block index -> what it wrote to stderr
    failed: int | None  # the block that raised


_RUNS: dict[Path, PageRun] = {}


def run_page(page: Path, workdir: Path, request: pytest.FixtureRequest) -> PageRun:
    if page in _RUNS:
        return _RUNS[page]
    workdir.mkdir(parents=True, exist_ok=True)
    blocks = [(b.index, b.code) for b in blocks_of(page) if b.not_run is None]
    address = {}
    if any(USES_RAY.search(code) for _, code in blocks):
        request.getfixturevalue("ray_session")
        import ray

        address["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    # Read after Ray started here: its ray.init sets what a driver needs to join it.
    env = {**os.environ, "RAYGENT_OFFLINE": "1", **address}
    (workdir / "blocks.json").write_text(json.dumps(blocks))
    (workdir / "run_blocks.py").write_text(RUNNER)
    result = subprocess.run(
        [sys.executable, "run_blocks.py", "blocks.json"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    failed = re.search(r"==raygent-doc-failed (\d+)==", result.stdout)
    run = PageRun(
        result.returncode,
        _cut(result.stdout),
        _cut(result.stderr),
        int(failed[1]) if failed else None,
    )
    _RUNS[page] = run
    return run


def _cut(text: str) -> dict[int, str]:
    parts = re.split(r"\n==raygent-doc-block (\d+)==\n", text)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_the_readme_and_the_manual_have_python_examples() -> None:
    assert blocks_of(README)
    assert all(blocks_of(DOCS / name) for name in ("getting-started.md", "simulator.md"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("page", "index"), CASES, ids=[f"{_name(p)}:{i}" for p, i in CASES])
def test_docs_python_block_runs(
    page: Path,
    index: int,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    block = blocks_of(page)[index]
    compile(block.code, f"{_name(page)} block {index}", "exec")  # it parses, run or not
    if block.not_run is not None:
        pytest.skip(f"the page says: not run: {block.not_run}")
    run = run_page(page, tmp_path_factory.mktemp(page.stem), request)
    if run.failed is not None and run.failed < index:
        pytest.fail(f"block {run.failed} of {_name(page)} failed before this one ran")
    output, errors = run.outputs.get(index), run.errors.get(index, "")
    assert output is not None, f"the block did not run (exit {run.returncode}): {errors}"
    assert run.failed != index, output + errors
    assert "Traceback" not in errors, errors
    for expected in PROMISE.findall(block.code):
        assert expected.strip() in output, (expected, output)


def test_a_block_is_left_unrun_only_by_a_visible_marker() -> None:
    # The marker is the only way; the list of such blocks stays short.
    unrun = [(_name(p), b.index, b.not_run) for p in PAGES for b in blocks_of(p) if b.not_run]
    assert len(unrun) <= 3, unrun
    assert not [
        _name(p)
        for p in PAGES
        if re.search(r"```py(thon)?\s*\{|```pycon|```python3", p.read_text())
    ], "a Python block the runner would not see"


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slugify(h, "-") for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=[_name(p) for p in PAGES])
def test_relative_links_point_at_a_file_and_heading(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing_anchor = bool(anchor) and file.suffix == ".md" and anchor not in _anchors(file)
        if not file.exists() or missing_anchor:
            broken.append(target)
    assert not broken, broken


def test_the_readme_links_every_page_of_the_manual() -> None:
    linked = {m.partition("#")[0] for m in LINK.findall(README.read_text())}
    pages = {f"docs/{p.relative_to(DOCS).as_posix()}" for p in DOCS.rglob("*.md")}
    assert pages - linked == set()


def test_every_error_class_with_a_code_is_in_the_errors_table() -> None:
    from raygent.errors import RaygentError

    _import_every_module_that_defines_errors()
    table = (DOCS / "errors.md").read_text()
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1].startswith("`") and cells[0].startswith("`"):
            name = cells[0].split()[0].strip("`").rsplit(".", 1)[-1]
            rows[name] = (cells[1].strip("`"), cells[2], cells[3])
    missing, wrong = [], []
    for cls in _subclasses(RaygentError):
        if not cls.__module__.startswith("raygent") or "code" not in vars(cls):
            continue  # a variant that keeps its parent's code is its parent's row
        said = rows.get(cls.__name__)
        truth = (cls.code, cls.category, "yes" if cls.default_retryable else "no")
        if said is None:
            missing.append(cls.__name__)
        elif said != truth:
            wrong.append((cls.__name__, said, truth))
    assert not missing, f"not in docs/errors.md: {missing}"
    assert not wrong, wrong


def _subclasses(cls: type) -> list[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += [c for c in _subclasses(sub) if c not in found]
    return found


def _import_every_module_that_defines_errors() -> None:
    import importlib
    import pkgutil

    for name in ("raygent", "raygent.actors", "raygent.stores"):
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not info.name.startswith(("raygent.sim", "raygent.__main__")):
                importlib.import_module(info.name)


@pytest.mark.timeout(300)
def test_the_manual_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    # CI's `mkdocs build --strict`: no broken link, no missing reference, no warning.
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_simulators_yaml_examples_are_scripts_it_loads() -> None:
    import yaml

    from raygent.sim import Script

    page = (DOCS / "simulator.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    assert examples
    for example in examples:
        assert Script.model_validate(yaml.safe_load(example)).rules


# Run options for raygent's own use (a nested run's), not for callers.
INTERNAL_RUN_OPTIONS = {"parent", "scope"}  # set by raygent for a run it starts


def test_the_agent_table_names_every_parameter_and_run_option() -> None:
    import inspect

    import raygent
    from raygent.agents import RunOptions

    rows = (DOCS / "agents.md").read_text().splitlines()
    factory = next(r for r in rows if r.startswith("| `raygent.agent("))
    listed = set(re.findall(r"(\w+)=", factory.split("`")[1]))
    assert listed == set(inspect.signature(raygent.agent).parameters)
    options = next(r for r in rows if r.startswith("| options |"))
    named = set(options.split("`")[1].replace(" ", "").split(","))
    assert named == set(RunOptions.__annotations__) - INTERNAL_RUN_OPTIONS


def test_the_home_page_says_no_written_page_is_coming() -> None:
    for row in (DOCS / "index.md").read_text().splitlines():
        page = re.match(r"\| \[[^]]+\]\(([\w-]+\.md)\)", row)
        if page and (DOCS / page[1]).exists():
            assert "(coming)" not in row, row
