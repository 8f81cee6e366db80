"""CPU and processes of this benchmark's process tree, read from /proc (Linux).

Ray started by `ray.init(address="local")` in the benchmark is a tree under it: GCS,
raylet, the dashboard agents and every worker (runners, gateways, tool executors, session
hosts) are its descendants. The simulator runs as a child too and is left out by pid.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    parent: int
    name: str  # the process title: "ray::BatchRunner.results", "raylet", "python"
    cpu: float  # seconds, user + system


def _read(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None  # it ended meanwhile
    fields = tail.split()
    title = argv[0].decode(errors="replace") if argv and argv[0] else head.split("(", 1)[1]
    return Proc(pid, int(fields[1]), title, (int(fields[11]) + int(fields[12])) / _TICK)


def tree(root: int, skip: set[int]) -> dict[int, Proc]:
    """`root` and its live descendants, without the `skip` pids (and theirs)."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (proc := _read(int(entry))) is not None:
            procs[proc.pid] = proc
    found = {}
    for pid, proc in procs.items():
        walk = pid
        while walk not in (root, 0, 1) and walk in procs and walk not in skip:
            walk = procs[walk].parent
        if walk == root and pid not in skip:
            found[pid] = proc
    return found


def pids_matching(text: bytes) -> set[int]:
    """Pids whose command line contains `text` (the simulator: b"raygent\\x00sim")."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text in f.read():
                        found.add(int(entry))
            except OSError:
                continue
    return found


def kind(proc: Proc, driver: int) -> str:
    """A process's part in the run, for the CPU split."""
    if proc.pid == driver:
        return "driver"
    name = proc.name
    if name.startswith("ray::"):
        role = name[5:].split(".", 1)[0].split(" ", 1)[0]
        return f"ray::{role}"
    base = os.path.basename(name.split(" ", 1)[0])
    return base if base in ("raylet", "gcs_server") else "other Ray processes"


def ray_workers(root: int, skip: set[int]) -> list[Proc]:
    """The `ray::` worker processes now alive (actors and task workers, idle or not)."""
    return [p for p in tree(root, skip).values() if p.name.startswith("ray::")]


class CpuMeter:
    """CPU seconds spent by each process of the tree between `start()` and `split()`,
    processes that started meanwhile included (those that ended are not seen)."""

    def __init__(self, root: int, skip: set[int]) -> None:
        self.root, self.skip = root, skip
        self._before: dict[int, float] = {}

    def start(self) -> None:
        self._before = {pid: p.cpu for pid, p in tree(self.root, self.skip).items()}

    def split(self) -> dict[str, float]:
        spent: dict[str, float] = defaultdict(float)
        for pid, proc in tree(self.root, self.skip).items():
            spent[kind(proc, self.root)] += proc.cpu - self._before.get(pid, 0.0)
        return dict(spent)
