"""The clock of the stages a pipeline declares (NOTE [declared stages] in ``declared.py``): each
declared callable is wrapped in a :class:`TimedStage` that records every call where it runs.

In this process a call is appended to an in-memory list; in any other process (a
``torchdata.nodes`` mapper's worker processes, a process pool the pipeline starts) to a file of
that process's own in the channel's folder, one line per call written with one ``os.write`` on an
``O_APPEND`` descriptor, so nothing is lost when the process ends without cleaning up. Each call
is stamped on ``time.monotonic()`` (system-wide on Linux), so the main process can keep only the
calls that ended inside its measurement window. A call also keeps its spans: the stretches of
time it ran itself, between the timed stages it called, on that clock, so the stages' times can
be set against the same wall-clock window (``declared_table.wall_shares``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAIN = "main"
THREAD = "thread"
PROCESS = "process"

_clock = time.monotonic  # system-wide on Linux: spans from other processes line up
_local = threading.local()
_lock = threading.Lock()
_calls: dict[str, list[StageCall]] = {}  # channel folder -> calls made in the owning process
_files: dict[str, int] = {}  # channel folder -> this (other) process's open descriptor


@dataclass(frozen=True)
class StageCall:
    """One call of a declared stage: its own time, without the stages it called."""

    stage: str
    where: str  # main | thread | process
    runner: str  # "pid:thread id": which thread or process ran it
    ended: float  # time.monotonic() at the end of the call
    seconds: float  # exclusive wall time
    # (start, end) on time.monotonic() of each stretch the call ran itself (between the timed
    # stages it called); empty from a source that did not say: then (ended - seconds, ended)
    spans: tuple[tuple[float, float], ...] = ()

    def own_spans(self) -> tuple[tuple[float, float], ...]:
        return self.spans or ((self.ended - self.seconds, self.ended),)


class StageChannel:
    """Where the calls of one measurement go: a folder for other processes' files, and this
    process's list."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)
        self.owner = os.getpid()
        with _lock:
            _calls[self.folder] = []

    def wrap(self, fn: Callable[..., Any], stage: str) -> TimedStage:
        return TimedStage(fn, stage, self.folder, self.owner)

    def calls(self) -> list[StageCall]:
        """Every call recorded so far, this process's and the other processes'."""
        with _lock:
            out = list(_calls.get(self.folder, []))
        for path in sorted(Path(self.folder).glob("*.calls")):
            for line in path.read_text(errors="replace").splitlines():
                parsed = _parse(line)
                if parsed is not None:
                    out.append(parsed)
        return out

    def close(self) -> None:
        with _lock:
            _calls.pop(self.folder, None)


class _Frame:
    """One call in progress on a thread: the spans it has run itself so far."""

    __slots__ = ("since", "spans")

    def __init__(self, since: float) -> None:
        self.since = since
        self.spans: list[tuple[float, float]] = []


class TimedStage:
    """A declared stage's callable, timed where it runs (exclusive of timed stages it calls)."""

    def __init__(self, fn: Callable[..., Any], stage: str, folder: str, owner: int) -> None:
        self.fn = fn
        self.stage = stage
        self.folder = folder
        self.owner = owner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stack: list[_Frame] | None = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        started = _clock()
        if stack:  # the caller's own stretch ends where this call begins
            caller = stack[-1]
            caller.spans.append((caller.since, started))
        frame = _Frame(started)
        stack.append(frame)
        try:
            return self.fn(*args, **kwargs)
        finally:
            ended = _clock()
            stack.pop()
            frame.spans.append((frame.since, ended))
            if stack:
                stack[-1].since = ended
            self._record(tuple(frame.spans), ended)

    def __getattr__(self, name: str) -> Any:
        # Only for names the wrapper lacks: the wrapped callable's attributes stay reachable.
        if name in ("fn", "stage", "folder", "owner"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def _record(self, spans: tuple[tuple[float, float], ...], ended: float) -> None:
        pid = os.getpid()
        thread = threading.current_thread()
        if pid != self.owner:
            where = PROCESS
        elif thread is threading.main_thread():
            where = MAIN
        else:
            where = THREAD
        seconds = sum(max(0.0, end - start) for start, end in spans)
        call = StageCall(self.stage, where, f"{pid}:{thread.ident}", ended, seconds, spans)
        if pid == self.owner:
            with _lock:
                calls = _calls.get(self.folder)
                if calls is not None:
                    calls.append(call)
            return
        _append(self.folder, call)


def _append(folder: str, call: StageCall) -> None:
    key = f"{folder}|{os.getpid()}"
    fd = _files.get(key)
    if fd is None:
        try:
            fd = os.open(
                os.path.join(folder, f"{os.getpid()}.calls"),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                0o600,
            )
        except OSError:
            return  # the measurement has ended and its folder is gone
        _files[key] = fd
    spans = ",".join(f"{start!r}:{end!r}" for start, end in call.spans)
    line = "\t".join(
        (call.stage, call.where, call.runner, repr(call.ended), repr(call.seconds), spans)
    )
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
    except OSError:
        pass


def _parse(line: str) -> StageCall | None:
    parts = line.split("\t")
    if len(parts) not in (5, 6):
        return None
    try:
        spans = (
            tuple(
                (float(start), float(end))
                for start, end in (pair.split(":") for pair in parts[5].split(",") if pair)
            )
            if len(parts) == 6
            else ()
        )
        return StageCall(parts[0], parts[1], parts[2], float(parts[3]), float(parts[4]), spans)
    except ValueError:
        return None
