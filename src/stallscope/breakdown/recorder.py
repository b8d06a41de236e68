"""Timing stages where they run: the recorder, ``ss.stage`` markers, and the wrappers
that travel to DataLoader workers (see NOTE [stage timing]).

NOTE [stage timing]
Every stage is timed where it runs. Before the loader pickles the dataset to
its workers, we wrap a *copy* of it: the dataset in :class:`InstrumentedDataset`,
each transform in a :class:`TimedTransform` proxy, the collate function in
:class:`TimedCollate`. In a worker, a per-process :class:`StageRecorder`
keeps a stack of open stages and charges wall time to the innermost one only
(exclusive time), so nested stages never count twice and whatever
``__getitem__`` does outside any known stage is charged to
``other (__getitem__)``: the shares add up to 100%. Read and decode are found
by the user's ``with ss.stage("read"):`` markers, or automatically where the
dataset calls a well-known reader or decoder (Pillow, OpenCV, NumPy, torch, wave,
soundfile, scipy, librosa, torchaudio, pandas: ``known_calls.py``). What is left of
``__getitem__`` is broken down by the functions it calls directly (``callees.py``),
each exclusive of the known stages inside it. The wrappers that travel to the
workers live in ``instrumented.py``. The recorder's totals since the previous batch ride along with
the batch itself (:class:`StageBatch`), so no extra queue is needed under fork or
spawn. The transfer is timed by stamps that execute while the batch is being
pickled in the worker's queue feeder thread and unpickled in the main process:
serialise (thread CPU time of pickling: for tensors, moving their storage into
shared memory, unless the collate already allocated it there, as default_collate
does in workers), queue (end of pickling in the worker to start of unpickling in
the main process, on the system-wide monotonic clock) and deserialise (the
main thread's CPU time of unpickling: see NOTE [deserialise timing]). The
first batch of every worker is a warm-up (imports, lazy initialisation) and is
left out. With no profiling active, ``ss.stage`` costs one ContextVar lookup.

NOTE [deserialise timing]
Unpickling a batch of tensors in the main process is not all work. Under the
default ``file_descriptor`` sharing strategy each tensor's storage arrives as a
file descriptor that the main process asks the worker's resource-sharer thread
for, over a socket (``rebuild_storage_fd`` → ``DupFd.detach``). That thread
needs the worker's GIL, and a worker busy in pure Python (a tokenizer) hands it
over only every switch interval (5 ms), a few times per request. On an LLM
stream of token batches (three int64 tensors) the wall time of unpickling read
29 ms per batch while the loader delivered a batch every 14 ms: the main thread
was waiting for the busy worker, overlapped with that worker's next batch, not
deserialising. So deserialise is the main thread's CPU time between the two
stamps; the wall time beyond it is kept apart (``deserialise_wait``) and is not
a stage.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import UsageError

READ = "read"
DECODE = "decode"
OTHER = "other (__getitem__)"
COLLATE = "collate"


# -- the recorder and the user's markers ------------------------------------------------


class StageRecorder:
    """Exclusive wall time per stage name in one process (see NOTE [stage timing])."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.pid = os.getpid()
        self.clock = clock
        self.totals: dict[str, float] = {}
        self.samples = 0
        # Per-sample exclusive time of each stage that ran in the sample (for p50/p90).
        self.sample_times: dict[str, list[float]] = {}
        self._stack: list[list[Any]] = []  # [name, started, traced]
        self._sample_start: dict[str, float] = {}
        # The callee tracer of the fetch under way (callees.py); it watches only while the
        # stage on top is ``other`` or a call it opened (``traced``), not inside known stages.
        self.tracer: Any = None
        self.fetches = 0

    def push(self, name: str, *, traced: bool = False) -> None:
        now = self.clock()
        if self._stack:
            top = self._stack[-1]
            self.totals[top[0]] = self.totals.get(top[0], 0.0) + (now - top[1])
            if top[2] and not traced and self.tracer is not None:
                self.tracer.pause()
        self._stack.append([name, now, traced])

    def pop(self) -> None:
        now = self.clock()
        name, started, traced = self._stack.pop()
        self.totals[name] = self.totals.get(name, 0.0) + (now - started)
        if self._stack:
            top = self._stack[-1]
            top[1] = now  # the enclosing stage resumes now
            if top[2] and not traced and self.tracer is not None:
                self.tracer.resume()

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[None]:
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def begin_sample(self) -> None:
        self._sample_start = dict(self.totals)

    def end_sample(self, count: int = 1) -> None:
        """Close a sample (or ``count`` fetched together): note each stage's time in it."""
        start = self._sample_start
        for name, total in self.totals.items():
            spent = total - start.get(name, 0.0)
            if spent > 0 and count > 0:
                self.sample_times.setdefault(name, []).append(spent / count)
        self.samples += count

    def note_batch(self, name: str, seconds: float, samples: int) -> None:
        """A per-batch stage (collate): its per-sample share for the percentiles."""
        if samples > 0:
            self.sample_times.setdefault(name, []).append(seconds / samples)

    def take(self) -> tuple[dict[str, float], int, dict[str, list[float]]]:
        """Totals, sample count and per-sample times since the previous call (which this resets)."""
        taken = (self.totals, self.samples, self.sample_times)
        self.totals, self.samples, self.sample_times = {}, 0, {}
        return taken


_ACTIVE: ContextVar[StageRecorder | None] = ContextVar("stallscope_stage_recorder", default=None)
_PROCESS_RECORDER: StageRecorder | None = None


def process_recorder() -> StageRecorder:
    """This process's recorder (a forked child gets a fresh one, not its parent's totals)."""
    global _PROCESS_RECORDER
    if _PROCESS_RECORDER is None or _PROCESS_RECORDER.pid != os.getpid():
        _PROCESS_RECORDER = StageRecorder()
    return _PROCESS_RECORDER


class StageMarker:
    """``with ss.stage("decode"):`` — or ``@ss.stage("decode")`` on a function.

    Times the block as stage ``name`` while stallscope profiles the pipeline;
    otherwise it does nothing beyond one ContextVar lookup.
    """

    __slots__ = ("name", "_recorder")

    def __init__(self, name: str) -> None:
        self.name = name
        self._recorder: StageRecorder | None = None

    def __enter__(self) -> StageMarker:
        recorder = _ACTIVE.get()
        if recorder is not None:
            recorder.push(self.name)
            self._recorder = recorder
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        recorder = self._recorder
        if recorder is not None:
            self._recorder = None
            recorder.pop()
        return False

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        name = self.name

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with StageMarker(name):
                return fn(*args, **kwargs)

        return timed


def stage(name: str) -> StageMarker:
    """Mark a stage of your ``__getitem__`` (or collate) by name, e.g. ``"read"``, ``"decode"``."""
    if not isinstance(name, str) or not name:
        raise UsageError("ss.stage() needs a non-empty stage name, e.g. ss.stage('decode').")
    return StageMarker(name)


@dataclass
class TransferTimes:
    """Worker→main transfer of one batch, in seconds."""

    serialise_cpu: float  # pickling in the worker's feeder thread (CPU time: GIL waits excluded)
    serialise_wall: float
    handoff: float  # end of collate to start of pickling (queue feeder thread wake-up)
    queue: float  # end of pickling in the worker to start of unpickling in the main process
    deserialise: float  # the main thread's CPU time of unpickling (NOTE [deserialise timing])
    # unpickling's wall time beyond that: waiting for the worker to hand over storages
    deserialise_wait: float = 0.0


class StageBatch:
    """A collated batch plus the stage totals of the worker that made it."""

    __slots__ = ("batch", "times", "samples", "worker", "ready", "sample_times", "transfer")

    def __init__(
        self,
        batch: Any,
        times: dict[str, float],
        samples: int,
        worker: int,
        ready: float,
        sample_times: dict[str, list[float]] | None = None,
    ) -> None:
        self.batch = batch
        self.times = times
        self.samples = samples
        self.worker = worker
        self.ready = ready  # worker's monotonic clock when collate finished
        self.sample_times = sample_times or {}
        self.transfer: TransferTimes | None = None

    # A library's loader may look at the batches it yields (mosaicml-streaming's
    # StreamingDataLoader counts samples by ``len(batch[0])``): it sees the user's batch.
    def __len__(self) -> int:
        return len(self.batch)

    def __getitem__(self, key: Any) -> Any:
        return self.batch[key]

    def __reduce__(self) -> tuple[Any, ...]:
        # The stamps are pickled (and unpickled) in argument order, so they bracket the batch.
        return (
            _rebuild_stage_batch,
            (
                _SendStamp(),
                _ReceiveStamp(),
                self.batch,
                _SendStamp(),
                self.times,
                self.samples,
                self.worker,
                self.ready,
                self.sample_times,
            ),
        )


class _SendStamp:
    """Pickles as the sender's clocks at the moment it is pickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_stamp, (time.monotonic(), time.thread_time()))


class _ReceiveStamp:
    """Unpickles as the receiver's clocks (wall, thread CPU) at the moment it is unpickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_receive_stamp, ())


def _receive_stamp() -> tuple[float, float]:
    return (time.monotonic(), time.thread_time())


def _stamp(wall: float, cpu: float) -> tuple[float, float]:
    return (wall, cpu)


def _rebuild_stage_batch(
    send_start: tuple[float, float],
    receive_start: tuple[float, float] | float,
    batch: Any,
    send_end: tuple[float, float],
    times: dict[str, float],
    samples: int,
    worker: int,
    ready: float,
    sample_times: dict[str, list[float]],
) -> StageBatch:
    received, received_cpu = time.monotonic(), time.thread_time()
    if isinstance(receive_start, tuple):
        receive_wall, receive_cpu = receive_start
        cpu = max(0.0, received_cpu - receive_cpu)
    else:  # a stamp from an older pickle: the wall time only
        receive_wall = receive_start
        cpu = max(0.0, received - receive_wall)
    wall = max(0.0, received - receive_wall)
    result = StageBatch(batch, times, samples, worker, ready, sample_times)
    result.transfer = TransferTimes(
        serialise_cpu=max(0.0, send_end[1] - send_start[1]),
        serialise_wall=max(0.0, send_end[0] - send_start[0]),
        handoff=max(0.0, send_start[0] - ready),
        queue=max(0.0, receive_wall - send_end[0]),
        deserialise=min(cpu, wall),
        deserialise_wait=max(0.0, wall - cpu),
    )
    return result
