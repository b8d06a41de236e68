"""What the user's code prints when stallscope calls it again: held back, said once.

NOTE [held output]
A command calls the user's TARGET once to load it, and that call prints as it would anywhere (a
dataset's "Loading dataset: 100%" bar, a library's banner). Trials then call the same factory
again, once per config and pass (``FactoryKind``, a one-shot ``IterableKind``), and printed code
is run before it is shown (``pipeline/verify.py``): every one of those calls prints the same
lines again, between stallscope's own progress bars, a dozen or more times in a ``doctor``. The
commands therefore hold back what those later calls print and end with one line that says how
often the user's code printed and what (:func:`held_note`). Output of a call that raises is
written out after all, since it may say why.

Only the calling thread's writes to ``sys.stdout`` and ``sys.stderr`` are held: rich's progress
display refreshes from its own thread through the same ``sys.stderr`` (a proxy while it is live),
and must reach the terminal. Writes to the file descriptors themselves (C code, worker processes)
are not Python's to hold. The library (``ss.tune`` …) holds nothing: only a command opens
:func:`holding`, so a notebook user sees their code's output as they wrote it.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HeldOutput:
    """What the user's code printed on the calls a command held."""

    calls: int = 0  # calls made while holding
    printing_calls: int = 0  # of them, those that printed anything
    first_line: str = ""  # the first line one of them printed (a progress bar's last state)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, text: str) -> None:
        with self._lock:
            self.calls += 1
            if not text.strip():
                return
            self.printing_calls += 1
            if not self.first_line:
                self.first_line = first_line(text)


_current: HeldOutput | None = None


@contextlib.contextmanager
def holding() -> Iterator[HeldOutput]:
    """Within: :func:`held_call` holds what the user's code prints (a command's whole run)."""
    global _current
    previous, _current = _current, HeldOutput()
    try:
        yield _current
    finally:
        _current = previous


class _ThreadSink:
    """A stand-in for ``sys.stdout``/``sys.stderr``: one thread's writes go to ``buffer``, every
    other thread's to ``original``. Everything else (``isatty``, ``encoding``, rich's
    ``rich_proxied_file``) is the original's."""

    def __init__(self, original: Any, buffer: io.StringIO, ident: int) -> None:
        self._original = original
        self._buffer = buffer
        self._ident = ident

    def write(self, text: str) -> int:
        if threading.get_ident() == self._ident:
            return self._buffer.write(text)
        return int(self._original.write(text) or 0)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if threading.get_ident() != self._ident:
            self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


@contextlib.contextmanager
def held_call() -> Iterator[None]:
    """Around one call of the user's code: outside :func:`holding`, nothing happens; inside,
    what this thread prints is held back and counted, or written out if the call raises."""
    held = _current
    if held is None:
        yield
        return
    buffer = io.StringIO()
    ident = threading.get_ident()
    out, err = sys.stdout, sys.stderr
    sys.stdout = _ThreadSink(out, buffer, ident)
    sys.stderr = _ThreadSink(err, buffer, ident)
    failed = True
    try:
        yield
        failed = False
    finally:
        # Put back only what is still ours: code that replaced a stream meanwhile keeps its own.
        if isinstance(sys.stdout, _ThreadSink) and sys.stdout._buffer is buffer:
            sys.stdout = out
        if isinstance(sys.stderr, _ThreadSink) and sys.stderr._buffer is buffer:
            sys.stderr = err
        text = buffer.getvalue()
        if failed and text:
            err.write(text)
        else:
            held.add(text)


def first_line(text: str) -> str:
    """The first line with words in ``text``; of a line redrawn with ``\\r`` (a progress bar),
    its last drawing."""
    for line in text.split("\n"):  # not splitlines(): it also splits at "\r"
        drawn = [part.strip() for part in line.split("\r") if part.strip()]
        if drawn:
            return drawn[-1]
    return ""


def held_note(held: HeldOutput, *, width: int = 100) -> str | None:
    """One line for the end of a command, or None where nothing was held."""
    if not held.printing_calls:
        return None
    line = held.first_line
    if len(line) > width:
        line = line[: width - 1] + "…"
    if held.calls == 1:
        which = "on the call"
    elif held.printing_calls == held.calls:
        which = f"on each of the {held.calls} calls"
    else:
        which = f"on {held.printing_calls} of the {held.calls} calls"
    return (
        f"note: your code printed {which} stallscope made after loading it (trials, and its "
        f"printed code run before it is shown); held back, the first line: {line!r}"
    )
