"""Where a :class:`~stallscope.training.watch.Watch` writes while the loop runs: one small protocol.

Every output (the live log line, TensorBoard scalars, per-step JSONL and CSV
rows) is a :class:`StepSink`: it wants to hear every ``every`` steps and gets
the recorder to read closed steps from. :class:`Sinks` fans out to the ones
asked for; with none, the watch holds :data:`NULL_SINKS` (Lightning's
``PassThroughProfiler`` idea), whose next due step never comes. So the hot
path only compares the step with one precomputed number and never asks
"is TensorBoard on?"; see NOTE [watch hot path] in watch.py.
"""

from __future__ import annotations

import csv as csv_module
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from ..errors import UsageError

# How often (in steps) pending per-step rows go to the JSONL/CSV files.
FLUSH_EVERY = 256
# TensorBoard scalars every this many steps when log_every is not given.
TENSORBOARD_EVERY = 50
ROW_FIELDS = ["step", "epoch", "t_s", "data_ms", "compute_ms", "first"]


class StepSource(Protocol):
    """What sinks read from the recorder (the Watch implements it)."""

    name: str

    @property
    def closed_steps(self) -> int: ...

    def window(self, start: int, end: int) -> tuple[float, float]: ...

    def step_rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]: ...

    def latest_buffer(self) -> tuple[int, int] | None: ...

    def latest_gpu_util(self) -> float | None: ...

    def latest_cpu(self) -> tuple[float, float] | None: ...

    def closed_windows(self, upto: int, *, final: bool) -> list[dict[str, Any]]: ...


class StepSink(Protocol):
    """One output. ``write`` covers the closed steps since its last write (each sink keeps its
    place)."""

    every: int

    def write(self, source: StepSource) -> None: ...

    def flush(self, source: StepSource) -> None:
        """Epoch end or close: write what is pending if this sink keeps rows (others do nothing)."""

    def close(self) -> None: ...


class Sinks:
    """Fan-out to several sinks; ``due_after(step)`` is the next step at which any of them wants to
    write."""

    def __init__(self, sinks: Sequence[StepSink]) -> None:
        self.sinks = list(sinks)

    def due_after(self, step: int) -> int:
        return (
            min((step // s.every + 1) * s.every for s in self.sinks) if self.sinks else sys.maxsize
        )

    def at_step(self, source: StepSource, step: int) -> int:
        """Called when ``step`` reaches the due step: the sinks due write; returns the next due
        step."""
        for sink in self.sinks:
            if step % sink.every == 0:
                sink.write(source)
        return self.due_after(step)

    def flush(self, source: StepSource) -> None:
        for sink in self.sinks:
            sink.flush(source)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


NULL_SINKS = Sinks([])


class LogSink:
    """A live line every ``every`` steps: mean data/compute ms, stall %, buffer, GPU and CPU."""

    def __init__(self, every: int, log: Callable[[str], Any]) -> None:
        self.every, self._log, self._upto = every, log, 0

    def write(self, source: StepSource) -> None:
        end = source.closed_steps
        if end > self._upto:
            self._log(live_line(source, self._upto, end))
            self._upto = end

    def flush(self, source: StepSource) -> None:
        pass

    def close(self) -> None:
        pass


def live_line(source: StepSource, start: int, end: int) -> str:
    """One log line for steps ``[start, end)``."""
    n = max(1, end - start)
    data, compute = source.window(start, end)
    total = data + compute
    parts = [
        f"[stallscope {source.name}] step {end}",
        f"data {data / n * 1000:.2f} ms",
        f"compute {compute / n * 1000:.2f} ms",
        f"stall {data / total * 100:.0f}%" if total > 0 else "stall n/a",
    ]
    buffer = source.latest_buffer()
    if buffer is not None:
        parts.append(f"buffer {buffer[0]}/{buffer[1]}")
    gpu = source.latest_gpu_util()
    if gpu is not None:
        parts.append(f"gpu {gpu:.0f}%")
    cpu = source.latest_cpu()
    if cpu is not None:
        parts.append(f"cpu main {cpu[0]:.0f}% workers {cpu[1]:.0f}%")
    return " | ".join(parts)


class TensorBoardSink:
    """Scalars under ``stallscope/<name>/``: data_ms, compute_ms, stall_fraction, buffer_ready,
    gpu_util."""

    def __init__(self, writer: Any, every: int) -> None:
        self.every, self._writer, self._upto = every, writer, 0

    def write(self, source: StepSource) -> None:
        end = source.closed_steps
        if end <= self._upto:
            return
        n = end - self._upto
        data, compute = source.window(self._upto, end)
        prefix = f"stallscope/{source.name}"
        add = self._writer.add_scalar
        add(f"{prefix}/data_ms", data / n * 1000, end)
        add(f"{prefix}/compute_ms", compute / n * 1000, end)
        if data + compute > 0:
            add(f"{prefix}/stall_fraction", data / (data + compute), end)
        buffer = source.latest_buffer()
        if buffer is not None:
            add(f"{prefix}/buffer_ready", buffer[0], end)
        gpu = source.latest_gpu_util()
        if gpu is not None:
            add(f"{prefix}/gpu_util", gpu, end)
        self._upto = end

    def flush(self, source: StepSource) -> None:
        pass

    def close(self) -> None:
        flush = getattr(self._writer, "flush", None)
        if flush is not None:
            try:
                flush()
            except (
                Exception
            ):  # a user's writer that fails on flush must not break the training loop
                pass


class RowFileSink:
    """Per-step rows (``step, epoch, t_s, data_ms, compute_ms, first``) appended to a JSONL or CSV
    file."""

    every = FLUSH_EVERY

    def __init__(self, path: str | Path, kind: str) -> None:
        self.path, self.kind = Path(path), kind
        self._handle: IO[str] | None = None
        self._csv: Any = None
        self._written = 0

    def write(self, source: StepSource) -> None:
        self.flush(source)

    def flush(self, source: StepSource) -> None:
        end = source.closed_steps
        if end <= self._written:
            return
        rows = source.step_rows(self._written, end)
        handle = self._open()
        if self._csv is not None:
            self._csv.writerows(rows)
        else:
            handle.write("".join(json.dumps(row) + "\n" for row in rows))
        handle.flush()
        self._written = end

    def _open(self) -> IO[str]:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("w", newline="" if self.kind == "csv" else None)
            if self.kind == "csv":
                self._csv = csv_module.DictWriter(self._handle, fieldnames=ROW_FIELDS)
                self._csv.writeheader()
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass


def open_sinks(
    *,
    log_every: int | None,
    log: Callable[[str], Any] | Any | None,
    tensorboard: Any,
    jsonl: str | Path | None,
    csv: str | Path | None,
    windows_jsonl: str | Path | None = None,
) -> Sinks:
    """The sinks a watch's options ask for (:data:`NULL_SINKS` when none).

    Time windows (:class:`~.windows.WindowSink`) go to ``windows_jsonl``, else
    next to ``jsonl`` (``run.jsonl`` -> ``run.windows.jsonl``), and to TensorBoard.
    """
    from .windows import WindowSink, windows_path_for

    log_line = log_function(
        log
    )  # checked even without log_every: a wrong type is a mistake either way
    sinks: list[StepSink] = []
    if log_every:
        sinks.append(LogSink(log_every, log_line))
    writer = open_tensorboard(tensorboard) if tensorboard is not None else None
    if windows_jsonl is None and jsonl is not None:
        windows_jsonl = windows_path_for(jsonl)
    if windows_jsonl is not None or writer is not None:
        sinks.append(
            WindowSink(windows_jsonl, writer)
        )  # before TensorBoardSink: its close flushes the writer
    if writer is not None:
        sinks.append(TensorBoardSink(writer, log_every or TENSORBOARD_EVERY))
    if jsonl is not None:
        sinks.append(RowFileSink(jsonl, "jsonl"))
    if csv is not None:
        sinks.append(RowFileSink(csv, "csv"))
    return Sinks(sinks) if sinks else NULL_SINKS


def open_tensorboard(spec: Any) -> Any:
    """A SummaryWriter for a log dir, or the user's own writer (anything with ``add_scalar``)."""
    if hasattr(spec, "add_scalar"):
        return spec
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise UsageError(
            f"tensorboard={str(spec)!r} needs the tensorboard package (pip install tensorboard), "
            "which is not installed."
        ) from None
    return SummaryWriter(log_dir=str(spec))


def log_function(log: Any) -> Callable[[str], Any]:
    """Where live lines go: stderr by default, a ``logging.Logger``'s ``info``, or any callable."""
    if log is None:
        return lambda line: print(line, file=sys.stderr, flush=True)
    if hasattr(log, "info"):  # a logging.Logger
        info: Callable[[str], Any] = log.info
        return info
    if callable(log):
        function: Callable[[str], Any] = log
        return function
    raise UsageError(f"log must be a callable or a logging.Logger, not {type(log).__name__}.")


def row(
    step: int, epoch: int, t_s: float, data_s: float, compute_s: float, first: bool
) -> dict[str, Any]:
    """One per-step row as the JSONL/CSV files hold it."""
    return {
        "step": step,
        "epoch": epoch,
        "t_s": round(t_s, 6),
        "data_ms": round(data_s * 1000, 4),
        "compute_ms": round(compute_s * 1000, 4) if math.isfinite(compute_s) else None,
        "first": first,
    }
