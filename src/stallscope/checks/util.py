"""Small helpers shared by the check probes."""

from __future__ import annotations

from ..errors import describe_exception


def describe_worker_exception(exc: BaseException, limit: int = 300) -> str:
    """One line for an exception a DataLoader re-raised from a worker.

    torch wraps a worker's exception with the worker's whole traceback in the
    message; its last line (``OSError: truncated shard``) is what a reader needs.
    """
    text = str(exc)
    if "Original Traceback" not in text:
        return describe_exception(exc, limit)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    if len(last) > limit:
        last = last[: limit - 1] + "…"
    return f"{last} (raised in a DataLoader worker)"
