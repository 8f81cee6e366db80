"""Test doubles and data shared by several test folders (tests/ is on sys.path through
its conftest): every message shape, a model step that hangs."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raygent import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelOptions,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from raygent.testing import hang

THINKING = {
    "type": "thinking",
    "thinking": "Let me add 2 and 2. ünïcødé ✓",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}

MESSAGE_SHAPES: dict[str, Message] = {
    "system": SystemMessage(content="You are terse."),
    "system-empty": SystemMessage(),
    "user-text": UserMessage(content="hello"),
    "user-multipart": UserMessage(content=[TextPart(text="look:"), TextPart(text=" twice")]),
    "user-image-url": UserMessage(
        content=[TextPart(text="what is it?"), ImagePart(url="https://example.com/cat.png")]
    ),
    "user-image-base64": UserMessage(
        content=[ImagePart(data="iVBORw0KGgo=", media_type="image/png")]
    ),
    "user-image-path": UserMessage(content=[ImagePart(path="./images/cat.jpg")]),
    "assistant-text": AssistantMessage(content="Hi."),
    "assistant-tool-calls": AssistantMessage(
        content="Looking it up.",
        tool_calls=[
            ToolCall.parse("call_1", "search", '{"q": "ray", "limit": 3}'),
            ToolCall.parse("call_2", "calc", '{"expr": "2+2", "nested": {"a": [1, 2.5, null]}}'),
        ],
    ),
    "assistant-malformed-args": AssistantMessage(
        tool_calls=[ToolCall.parse("call_3", "search", '{"q": "unterminated')]
    ),
    "assistant-thinking": AssistantMessage(
        content=[
            ProviderBlock(provider="anthropic", kind="thinking", data=THINKING),
            ProviderBlock(provider="anthropic", kind="redacted_thinking", data=REDACTED),
            TextPart(text="4"),
        ]
    ),
    "tool-result": ToolMessage(call_id="call_1", name="search", content="3 results"),
    "tool-error": ToolMessage(call_id="call_2", content="division by zero", is_error=True),
}


class Gate:
    """A model step that says when the request arrived, then hangs until aborted."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    def __call__(self, messages: list[Message], options: ModelOptions) -> Any:
        self.arrived.set()
        return hang()


def driver_env(backend: str) -> dict[str, str]:
    """The environment of a driver process of its own, on `backend` ("local", or "ray":
    the test session's Ray, which the caller has started)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAYGENT_BACKEND"] = backend
    if backend == "ray":
        import ray

        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return env


async def until(condition: Callable[[], object], timeout: float = 120.0) -> None:
    """Wait (bounded) until `condition()` holds, polling: for a state another process
    writes (a file, a sink), where there is nothing to await."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


async def kill_when(
    command: list[str], env: dict[str, str], condition: Callable[[], object]
) -> None:
    """Start `command` (a driver process of its own) and SIGKILL it once `condition()`
    holds; fails if it ended before."""
    driver = await asyncio.create_subprocess_exec(*command, env=env)
    try:
        await until(lambda: condition() or driver.returncode is not None)
        assert driver.returncode is None, "the driver ended before it could be killed"
        driver.send_signal(signal.SIGKILL)
        await asyncio.wait_for(driver.wait(), 30)
    finally:
        if driver.returncode is None:
            driver.kill()
            await driver.wait()


async def run_to_end(command: list[str], env: dict[str, str], timeout: float = 300) -> bytes:
    """Run `command` to its end; what it printed (it must exit 0)."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    said, _ = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode == 0, said.decode()
    return said


def sunk(sink: Path) -> list[str]:
    """The whole lines of a JSONL sink another process writes (none yet: [])."""
    if not sink.exists():
        return []
    return [line for line in sink.read_text().splitlines() if line.endswith("}")]


def ray_pids(kind: str) -> list[int]:
    """The worker processes of this session's Ray whose title names `kind` (Ray titles
    an actor's process `ray::ClassName...`); they are the raylet's children."""
    import psutil
    import ray

    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    found = []
    for child in psutil.Process(raylet).children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if title.startswith("ray::") and kind in title:
            found.append(child.pid)
    return found
