"""The process to attach to and its tree: is it there, is it Python, which processes train.

A DataLoader's workers are children of the process that iterates it; under ``torchrun`` the
launcher's children are the ranks (``RANK`` in their environment), and each rank's children its
workers. :func:`training_processes` names the processes whose main thread trains: the target
itself, or, given a launcher (or ``tree=True``), each rank.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from ..errors import UsageError

CMDLINE_MAX_CHARS = 200
_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


@dataclass
class ProcessInfo:
    pid: int
    parent: int | None
    name: str
    cmdline: str
    rank: int | None  # RANK from its environment, where readable

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_process(pid: int) -> psutil.Process:
    """The process ``pid``, or a one-sentence UsageError: not running, not Python, ourselves."""
    if pid <= 0:
        raise UsageError(f"{pid} is not a process id; pass the PID of the training script.")
    if pid == os.getpid():
        raise UsageError("stallscope cannot attach to itself; pass the PID of the training script.")
    try:
        process = psutil.Process(pid)
        name = process.name()
        status = process.status()
    except psutil.NoSuchProcess:
        raise UsageError(f"no process with PID {pid} is running.") from None
    except psutil.AccessDenied:
        raise UsageError(
            f"process {pid} belongs to another user; run stallscope as that user or as root."
        ) from None
    if status == psutil.STATUS_ZOMBIE:
        raise UsageError(f"process {pid} has ended (it is a zombie waiting for its parent).")
    if not is_python(process):
        raise UsageError(
            f"process {pid} ({name}) is not a Python process; pass the PID of the training script."
        )
    return process


def is_python(process: psutil.Process) -> bool:
    """Python by its executable's name, else by a libpython mapped into it."""
    with contextlib.suppress(psutil.Error, OSError):
        names = [process.name(), os.path.basename(process.exe())]
        if any(n.lower().startswith(("python", "pypy")) for n in names):
            return True
    with contextlib.suppress(psutil.Error, OSError):
        return any("libpython" in os.path.basename(m.path) for m in process.memory_maps())
    return False


def describe(process: psutil.Process, parent: int | None) -> ProcessInfo:
    name, cmdline, rank = "?", "", None
    with contextlib.suppress(psutil.Error):
        name = process.name()
    with contextlib.suppress(psutil.Error):
        cmdline = " ".join(process.cmdline())[:CMDLINE_MAX_CHARS]
    with contextlib.suppress(psutil.Error, OSError, ValueError, KeyError):
        rank = int(process.environ()["RANK"])
    return ProcessInfo(process.pid, parent, name, cmdline, rank)


def process_tree(process: psutil.Process) -> list[ProcessInfo]:
    """The target (with its own parent) and every descendant alive now, parents before
    children."""
    parent = None
    with contextlib.suppress(psutil.Error):
        parent = process.ppid() or None
    infos = [describe(process, parent)]
    with contextlib.suppress(psutil.Error):
        for child in process.children(recursive=True):
            parent = None
            with contextlib.suppress(psutil.Error):
                parent = child.ppid()
            infos.append(describe(child, parent))
    return infos


def is_launcher(info: ProcessInfo) -> bool:
    return info.rank is None and any(word in info.cmdline for word in _LAUNCHERS)


def training_processes(tree: list[ProcessInfo], *, whole_tree: bool = False) -> list[int]:
    """The pids whose main thread trains: the target, or under a launcher (``torchrun``, or
    ``whole_tree``) its Python children, the ranks."""
    target = tree[0]
    if not (whole_tree or is_launcher(target)):
        return [target.pid]
    children = [p for p in tree if p.parent == target.pid]
    ranked = [p for p in children if p.rank is not None]
    chosen = ranked or [p for p in children if p.name.lower().startswith(("python", "pypy"))]
    return sorted(p.pid for p in chosen) or [target.pid]
