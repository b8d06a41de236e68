"""Small helpers shared by the check probes."""

from __future__ import annotations

from ..errors import describe_exception, worker_traceback_tail


def describe_worker_exception(exc: BaseException, limit: int = 300) -> str:
    """One line for an exception a DataLoader re-raised from a worker.

    torch wraps a worker's exception with the worker's whole traceback in the
    message; its last line (``OSError: truncated shard``) is what a reader needs.
    """
    tail = worker_traceback_tail(exc)
    if tail is None:
        return describe_exception(exc, limit)
    last = tail[0]
    if len(last) > limit:
        last = last[: limit - 1] + "…"
    return f"{last} (raised in a DataLoader worker)"
