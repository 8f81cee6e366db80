"""Conventions as tests: lint, types, the public API, packaging, cluster.yaml."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import raygent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_API = {
    # Executables above the agent (raygent.flows).
    "END",
    "Executable",
    "FlowReport",
    "FlowResult",
    "Goto",
    "Step",
    "Workflow",
    "WorkflowState",
    "step",
    "workflow",
    "Router",
    "Supervisor",
    "SupervisorState",
    "Vote",
    "fan_out",
    "router",
    "supervisor",
    "vote",
    "Approve",
    "Deny",
    "Durable",
    "PendingCall",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentReport",
    "AgentResult",
    "AgentStream",
    "AnthropicModel",
    "BedrockModel",
    "GeminiModel",
    "AssistantMessage",
    "AttachmentPolicy",
    "BatchResult",
    "Budget",
    "BudgetExceededError",
    "Estimate",
    "estimate",
    "estimate_sync",
    "Capabilities",
    "Compaction",
    "CompactionResult",
    "Cost",
    "ImagePart",
    "Memory",
    "Message",
    "Middleware",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "OutboundPolicy",
    "Pricing",
    "RateLimit",
    "RateReading",
    "ProviderBatch",
    "ProviderBlock",
    "Repair",
    "ResponseCache",
    "ResponseSchema",
    "Retry",
    "Route",
    "ServerCompaction",
    "Session",
    "SystemMessage",
    "SystemPrompt",
    "TextPart",
    "Tier",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolMessage",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "__version__",
    "agent",
    "batch",
    "batch_sync",
    "compaction",
    "current_backend",
    "register_tenant",
    "Tenant",
    "data",
    "errors",
    "eval",
    "fallback_model",
    "init",
    "observers",
    "tool",
    "total_cost",
}


def test_public_api_is_exactly_what_is_listed() -> None:
    # A change to the public surface is deliberate: update this list with it.
    assert set(raygent.__all__) == PUBLIC_API
    for name in raygent.__all__:
        assert hasattr(raygent, name), name


def test_every_package_folder_is_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found == listed


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (it is in the [test] extra)")
    return found


@pytest.mark.parametrize(
    "args",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_static_checks_pass(args: list[str]) -> None:
    # mypy runs on the package as users import it (scripts/typecheck.py says why).
    command = (
        [sys.executable, str(ROOT / "scripts" / "typecheck.py")]
        if args == ["mypy"]
        else [_tool(args[0]), *args[1:]]
    )
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cluster_yaml_is_a_valid_ray_cluster_config() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(config))
    # Ray must not take Redis's port.
    commands = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert "6379" not in commands and "--port=6380" in commands
    types = config["available_node_types"]
    assert types[config["head_node_type"]]["resources"] == {"CPU": 0}
    assert any(name != config["head_node_type"] for name in types)
    assert any("raygent" in command for command in config["setup_commands"])


def test_no_module_in_the_package_grows_past_600_lines() -> None:
    for folder in ("runtime", "actors", "stores"):
        for path in (ROOT / folder).rglob("*.py"):
            lines = path.read_text().count("\n")
            assert lines <= 600, f"{path.relative_to(ROOT)} has {lines} lines"


def test_runtime_never_imports_ray() -> None:
    # The core runs with no Ray at all; only actors/ may import it.
    for path in (ROOT / "runtime").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            assert not any(n == "ray" or n.startswith("ray.") for n in names), path
