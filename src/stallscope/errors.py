"""Errors that reach the user as one sentence and an exit code.

A ``UsageError`` is the user's to fix (a bad target, an empty dataset, a batch
size larger than the dataset...). The CLI prints its message and exits with
``exit_code`` (2), with no traceback unless ``--debug`` is given. Anything else
that escapes is our bug and keeps its traceback.
"""

from __future__ import annotations

import re


class StallscopeError(Exception):
    """Base class of the errors stallscope raises on purpose."""

    exit_code = 1


class UsageError(StallscopeError):
    """Bad usage or a target that cannot be loaded or measured: exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class PipelineError(UsageError):
    """The user's pipeline failed while being measured (dataset raised, worker died)."""


class NoFirstBatch(PipelineError):
    """A trial with worker processes gave no first batch within its timeout: the workers never
    delivered (a hang at start, or in every worker's first sample). The sweep tries no more
    configs with workers (NOTE [no first batch] in ``throughput/measure.py``)."""


NOT_TRIED = "not tried: "


def not_tried(error: str | None) -> bool:
    """A config's error that says it was never run (NOTE [no first batch]), not that it failed."""
    return bool(error) and str(error).startswith(NOT_TRIED)


class NotMeasured(PipelineError):
    """A step's own stand-in for the user's loader (an instrumented dataset, a rebuilt loader)
    could not be built or does not yield batches like the user's: the step says "not measured:
    why" and a command that runs several steps goes on (NOTE [verified stand-ins] in
    ``breakdown/probe.py``); a command of that step alone exits 2 with the sentence."""


def describe_exception(exc: BaseException, limit: int = 200) -> str:
    """``TypeName: message`` on one line, shortened to ``limit`` characters."""
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def worker_traceback_tail(exc: BaseException) -> tuple[str, str | None] | None:
    """For an exception a DataLoader re-raised from a worker: the worker's own last traceback line
    (``OSError: truncated shard``) and the worker's id when torch names it; None for any other
    exception.

    torch wraps a worker's exception as "Caught X in DataLoader worker process N. Original Traceback
    ... X: msg"; the last line is what a reader needs.
    """
    text = str(exc)
    if "Original Traceback" not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    where = re.search(r"worker process (\d+)", text)
    return (lines[-1] if lines else type(exc).__name__), (where.group(1) if where else None)
