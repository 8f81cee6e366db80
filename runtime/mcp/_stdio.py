"""The stdio transport: an MCP server as a process of ours, its stderr read by us.

Not the SDK's `stdio_client`, which keeps the process to itself: here the process is
known, so a server that dies says how (its exit code and the last lines of its stderr),
its stderr goes where the user says (a file, a logger, a stream) and a toolset that is
dropped can still stop it. The shutdown is the spec's (and the SDK's): close stdin, wait,
then SIGTERM and SIGKILL the process group.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import IO, Any, Union

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.text import TextReceiveStream
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.message import SessionMessage

__all__ = ["Stderr", "StdioPeer", "stdio_client"]

# Where a server's stderr goes: None (this process's stderr), a file path (appended), a
# logger (a record a line, INFO) or a text stream (anything with `write`).
Stderr = Union[None, str, "os.PathLike[str]", logging.Logger, IO[str]]

_TAIL = 20  # lines of stderr kept for the error of a server that died
_LINE = 400  # characters of a stderr line kept in that error
_GRACE = 2.0  # after stdin closes, before SIGTERM; then before SIGKILL
_STREAMS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


class StdioPeer:
    """One start of a server process: its pid, exit code and last stderr lines."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self.tail: deque[str] = deque(maxlen=_TAIL)
        self._process: Process | None = None

    def explain(self, error: BaseException) -> tuple[str | None, bool]:
        """Why the server could not be started, and whether trying again may help: a
        process that exited at start, or a command that cannot run, is for the user to
        fix (not retryable)."""
        return (self.note() or None), False

    def note(self) -> str:
        """'it exited with code N' and its last stderr lines, once it exited."""
        code = self._returncode()
        if code is None:
            return ""
        text = f"it exited with code {code}"
        if self.tail:
            lines = "\n".join(f"  {line}" for line in self.tail)
            text += f"; the last lines of its stderr:\n{lines}"
        return text

    def kill(self) -> None:
        """Stop the process group now (from any thread, with no event loop)."""
        if self.pid is None or self._returncode() is not None:
            return
        with suppress(ProcessLookupError, PermissionError, OSError):
            if sys.platform == "win32":  # pragma: no cover
                os.kill(self.pid, signal.SIGTERM)
            else:
                os.killpg(self.pid, signal.SIGTERM)

    def _returncode(self) -> int | None:
        if self.returncode is None and self._process is not None:
            self.returncode = self._process.returncode
        return self.returncode


@asynccontextmanager
async def stdio_client(
    params: StdioServerParameters, stderr: Stderr, peer: StdioPeer
) -> AsyncIterator[tuple[Any, Any, StdioPeer]]:
    """Start the server; yield the session's (read, write) streams and the peer."""
    process = await anyio.open_process(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        start_new_session=True,  # its own process group: the shutdown stops its children
    )
    # No await before the task group: a cancellation in between would leak the process.
    peer.pid, peer._process = process.pid, process
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    errors_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        async with to_session:
            buffer = ""
            try:
                text = TextReceiveStream(process.stdout, encoding=params.encoding, errors="replace")
                async for chunk in text:
                    *lines, buffer = (buffer + chunk).split("\n")
                    for line in lines:
                        if line.strip():
                            await to_session.send(_message(line))
            except _STREAMS:
                pass  # the session is gone, or the pipe: the session sees the end
        await _drain(process.stdout)  # a server blocked on a full pipe could not exit

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((line + "\n").encode(params.encoding))
        except _STREAMS:
            await to_session.aclose()  # the server stopped reading: end the session

    async def stderr_reader() -> None:
        assert process.stderr is not None
        try:
            with _sink(stderr) as forward:
                buffer = ""
                try:
                    async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                        *lines, buffer = (buffer + chunk).split("\n")
                        for line in lines:
                            peer.tail.append(line[:_LINE])
                            forward(line)
                except _STREAMS:
                    pass
                if buffer:
                    peer.tail.append(buffer[:_LINE])
                    forward(buffer)
        finally:
            errors_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(stdout_reader)
        tasks.start_soon(stdin_writer)
        tasks.start_soon(stderr_reader)
        try:
            yield read, write, peer
        finally:
            # Bounded, and shielded: a cancelled owner (its loop ending) still stops it.
            with anyio.CancelScope(shield=True):
                read.close()
                write.close()
                await _stop(process)
                with anyio.move_on_after(_GRACE):  # its last stderr lines, for the error
                    await errors_done.wait()
                peer.returncode = process.returncode
                for stream in (read, write, to_session, from_session):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


def _message(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # the session reports it; the server goes on
        return exc


async def _drain(stream: ByteReceiveStream) -> None:
    with suppress(*_STREAMS):
        while True:
            await stream.receive()


async def _stop(process: Process) -> None:
    assert process.stdin is not None
    with suppress(*_STREAMS):
        await process.stdin.aclose()
    if await _exited(process, _GRACE):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError, PermissionError):
            if sys.platform == "win32":  # pragma: no cover
                process.kill()
            else:
                os.killpg(process.pid, sig)
        if await _exited(process, _GRACE):
            return


async def _exited(process: Process, within: float) -> bool:
    # Not process.wait(): it also waits for the pipes, which a child may hold open.
    with anyio.move_on_after(within):
        while process.returncode is None:  # noqa: ASYNC110 (no event says it exited)
            await anyio.sleep(0.01)
    return process.returncode is not None


class _sink:
    """A context giving the function that forwards one stderr line where it should go."""

    def __init__(self, target: Stderr) -> None:
        self.target = target
        self.file: IO[str] | None = None

    def __enter__(self) -> Any:
        target = self.target
        if isinstance(target, logging.Logger):
            return lambda line: target.info("%s", line)
        if target is None:
            return lambda line: _write(sys.stderr, line)
        if isinstance(target, (str, os.PathLike)):
            self.file = open(target, "a", encoding="utf-8", buffering=1)
            file = self.file
            return lambda line: _write(file, line)
        stream = target
        return lambda line: _write(stream, line)

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()


def _write(stream: IO[str], line: str) -> None:
    with suppress(ValueError, OSError):  # closed or broken: the tail still has it
        stream.write(line + "\n")
        stream.flush()
