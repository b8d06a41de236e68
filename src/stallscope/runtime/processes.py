"""Child-process bookkeeping: no worker may outlive a command.

NOTE [worker shutdown]
DataLoader iterators shut their workers down when garbage-collected, but a
command can end in ways that skip that: Ctrl-C in the middle of a fetch, a
worker stuck in C code, a timeout we impose. Every command therefore ends
through :func:`reap_children`, which terminates (then kills) every descendant
of this process that is still alive. Probes that start workers also shut
their iterators down explicitly (``shutdown_iterator``) as soon as they are
done, so reaping is a safety net, not the normal path. Queue reads always
carry a timeout (DataLoader ``timeout=``), so the main process never blocks
forever on a worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
from collections.abc import Iterator
from typing import Any

import psutil

# multiprocessing's own per-interpreter helpers: they exit with this process, and
# killing them early only makes the next spawn complain. Their children (workers
# started through a forkserver) are still reaped.
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def default_start_method() -> str:
    """The start method a DataLoader with no ``multiprocessing_context`` uses here: the one set with
    ``set_start_method``, else the platform's default (without fixing the user's context for good)."""
    current = multiprocessing.get_start_method(allow_none=True)
    if current:
        return current
    if sys.platform in ("win32", "darwin"):
        return "spawn"
    return "forkserver" if sys.version_info >= (3, 14) else "fork"


def _is_mp_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(helper in cmdline for helper in _MP_HELPERS)


def descendants() -> list[psutil.Process]:
    """Live child processes of this one, at any depth, except multiprocessing's helpers."""
    try:
        return [p for p in psutil.Process().children(recursive=True) if not _is_mp_helper(p)]
    except psutil.Error:
        return []


def reap_children(timeout: float = 3.0, *, exclude: set[int] | None = None) -> list[int]:
    """Terminate, then kill, every descendant still alive; return their pids."""
    procs = [p for p in descendants() if not exclude or p.pid not in exclude]
    if not procs:
        return []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return [p.pid for p in procs]


def shutdown_iterator(iterator: Any) -> None:
    """Shut a DataLoader iterator's workers down now, not at garbage collection."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        with contextlib.suppress(Exception):
            shutdown()


@contextlib.contextmanager
def no_orphans(timeout: float = 3.0) -> Iterator[None]:
    """Reap any child this block leaves behind, however it ends."""
    before = {p.pid for p in descendants()}
    try:
        yield
    finally:
        reap_children(timeout, exclude=before)


def worker_pids(iterator: Any) -> list[int]:
    """Pids of a live DataLoader iterator's workers (empty for num_workers=0)."""
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if getattr(w, "pid", None)]
