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
dataset calls Pillow (``Image.open`` reads the whole file as "read", its
header parse and pixel decoding are "decode") or ``numpy.load``/``torch.load``
("read"). The recorder's totals since the previous batch ride along with the
batch itself (:class:`StageBatch`), so no extra queue is needed under fork or
spawn. The transfer is timed by stamps that execute while the batch is being
pickled in the worker's queue feeder thread and unpickled in the main process:
serialise (thread CPU time of pickling: for tensors, moving their storage into
shared memory, unless the collate already allocated it there, as default_collate
does in workers), queue (end of pickling in the worker to start of unpickling in
the main process, on the system-wide monotonic clock) and deserialise. The
first batch of every worker is a warm-up (imports, lazy initialisation) and is
left out. With no profiling active, ``ss.stage`` costs one ContextVar lookup.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from torch.utils.data import IterableDataset

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
        self._stack: list[list[Any]] = []  # [name, started]
        self._sample_start: dict[str, float] = {}

    def push(self, name: str) -> None:
        now = self.clock()
        if self._stack:
            top = self._stack[-1]
            self.totals[top[0]] = self.totals.get(top[0], 0.0) + (now - top[1])
        self._stack.append([name, now])

    def pop(self) -> None:
        now = self.clock()
        name, started = self._stack.pop()
        self.totals[name] = self.totals.get(name, 0.0) + (now - started)
        if self._stack:
            self._stack[-1][1] = now  # the enclosing stage resumes now

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

    def __exit__(self, *exc: object) -> bool:
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


# -- automatic read/decode detection for well-known calls -------------------------------


class _KnownCalls:
    """Swaps Pillow's ``Image.open``/``ImageFile.load``, ``numpy.load`` and ``torch.load``
    for timing wrappers. Wrappers pass straight through when no recorder is active."""

    installed: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
    depth = 0

    @classmethod
    def install(cls) -> None:
        if cls.depth == 0:
            cls.installed = []
            for owner, attr, make in _known_call_targets():
                original = (
                    owner.__dict__.get(attr)
                    if isinstance(owner, type)
                    else getattr(owner, attr, None)
                )
                if original is None or getattr(original, "__stallscope_wrapped__", False):
                    continue
                wrapper = make(original)
                wrapper.__stallscope_wrapped__ = True
                setattr(owner, attr, wrapper)
                cls.installed.append((owner, attr, original))
        cls.depth += 1

    @classmethod
    def uninstall(cls) -> None:
        cls.depth = max(0, cls.depth - 1)
        if cls.depth == 0:
            for owner, attr, original in reversed(cls.installed):
                setattr(owner, attr, original)
            cls.installed = []


@contextlib.contextmanager
def known_calls_timed() -> Iterator[None]:
    _KnownCalls.install()
    try:
        yield
    finally:
        _KnownCalls.uninstall()


def _known_call_targets() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    targets: list[tuple[Any, str, Callable[[Any], Any]]] = []
    image = sys.modules.get("PIL.Image")
    if image is not None:
        targets.append((image, "open", _wrap_image_open))
        # ImageFile.load decodes pixels lazily; plugins that override load usually call it,
        # the ones that do not are wrapped themselves (a nested "decode" counts once).
        for plugin in {
            factory
            for factory, _ in getattr(image, "OPEN", {}).values()
            if isinstance(factory, type)
        }:
            if "load" in plugin.__dict__:
                targets.append((plugin, "load", _wrap_decode_method))
    image_file = sys.modules.get("PIL.ImageFile")
    if image_file is not None:
        targets.append((image_file.ImageFile, "load", _wrap_decode_method))
    for module_name in ("numpy", "torch"):
        module = sys.modules.get(module_name)
        if module is not None and callable(getattr(module, "load", None)):
            targets.append((module, "load", _wrap_read_function))
    return targets


def _wrap_image_open(original: Callable[..., Any]) -> Callable[..., Any]:
    def open_timed(fp: Any, mode: str = "r", formats: Any = None, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None or mode != "r":
            return original(fp, mode, formats, **kwargs)
        data, path = _read_whole_file(fp, recorder)
        recorder.push(DECODE)
        try:
            image = original(io.BytesIO(data) if data is not None else fp, mode, formats, **kwargs)
        finally:
            recorder.pop()
        if path is not None:
            with contextlib.suppress(Exception):
                image.filename = path
        return image

    return open_timed


def _read_whole_file(fp: Any, recorder: StageRecorder) -> tuple[bytes | None, str | None]:
    """Read an image file's bytes as the "read" stage; Pillow would otherwise read it lazily
    inside decoding, mixing storage time into decode time."""
    if isinstance(fp, (str, bytes, os.PathLike)):
        path = os.fsdecode(fp)
        recorder.push(READ)
        try:
            with builtins.open(path, "rb") as handle:
                return handle.read(), path
        finally:
            recorder.pop()
    fileno = getattr(fp, "fileno", None)
    if fileno is None or not hasattr(fp, "read"):
        return None, None
    try:
        fileno()  # BytesIO and friends raise: already in memory, nothing to read
        position = fp.tell()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None, None
    recorder.push(READ)
    try:
        fp.seek(0)  # Image.open reads from the start too
        data = fp.read()
    finally:
        recorder.pop()
    with contextlib.suppress(OSError, ValueError):
        fp.seek(position)
    return data, None


def _wrap_decode_method(original: Callable[..., Any]) -> Callable[..., Any]:
    def load_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        # Pillow calls load() before every operation; only a pending decode (tiles) is a stage.
        if recorder is None or not getattr(self, "tile", None):
            return original(self, *args, **kwargs)
        recorder.push(DECODE)
        try:
            return original(self, *args, **kwargs)
        finally:
            recorder.pop()

    return load_timed


def _wrap_read_function(original: Callable[..., Any]) -> Callable[..., Any]:
    def read_timed(*args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None:
            return original(*args, **kwargs)
        recorder.push(READ)
        try:
            return original(*args, **kwargs)
        finally:
            recorder.pop()

    return read_timed


# -- objects that travel to the workers -------------------------------------------------


class TimedTransform:
    """A transform that times itself as stage ``name``; otherwise it is the transform.

    Attribute access is forwarded and ``__class__`` reports the wrapped class, so
    pipelines that inspect their transforms (albumentations checks types and
    reads ``p``) see the original.
    """

    def __init__(self, name: str, inner: Callable[..., Any]) -> None:
        self.stage_name = name
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None:
            return self.inner(*args, **kwargs)
        recorder.push(self.stage_name)
        try:
            return self.inner(*args, **kwargs)
        finally:
            recorder.pop()

    def __getattr__(self, attr: str) -> Any:
        try:
            inner = object.__getattribute__(self, "inner")
        except AttributeError:
            raise AttributeError(attr) from None
        return getattr(inner, attr)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(object.__getattribute__(self, "inner"))

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimedTransform, (self.stage_name, self.inner))

    def __repr__(self) -> str:
        return f"TimedTransform({self.stage_name!r}, {self.inner!r})"


class SkippedTransform:
    """Stands in for a random transform in the no-augmentation baseline: passes its input on."""

    def __init__(self, name: str) -> None:
        self.stage_name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs and not args:  # albumentations style: t(image=...) -> dict
            return dict(kwargs)
        if len(args) == 1 and not kwargs:
            return args[0]
        return args

    def __repr__(self) -> str:
        return f"SkippedTransform({self.stage_name!r})"


def _start_getitem() -> tuple[StageRecorder, Any]:
    recorder = process_recorder()
    if not _KnownCalls.depth:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            _KnownCalls.install()  # a worker is ours for its whole life: install once
    token = _ACTIVE.set(recorder)
    recorder.begin_sample()
    recorder.push(OTHER)
    return recorder, token


def _end_getitem(recorder: StageRecorder, token: Any, samples: int) -> None:
    recorder.pop()
    recorder.end_sample(samples)
    _ACTIVE.reset(token)


class InstrumentedDataset:
    """A map-style dataset whose ``__getitem__`` runs under this process's stage recorder."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        if not callable(getattr(inner, "__getitems__", None)):
            self.__getitems__ = None  # the fetcher then indexes item by item, like the original

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: Any) -> Any:
        recorder, token = _start_getitem()
        try:
            return self.inner[index]
        finally:
            _end_getitem(recorder, token, 1)

    def __getitems__(self, indices: list[Any]) -> Any:
        recorder, token = _start_getitem()
        try:
            return self.inner.__getitems__(indices)
        finally:
            _end_getitem(recorder, token, len(indices))


class InstrumentedIterableDataset(IterableDataset):
    """An iterable dataset whose every ``next()`` runs under the stage recorder."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[Any]:
        recorder, token = _start_getitem()
        try:
            iterator = iter(self.inner)
        finally:
            _end_getitem(recorder, token, 0)
        while True:
            recorder, token = _start_getitem()
            try:
                item = next(iterator)
            except StopIteration:
                _end_getitem(recorder, token, 0)
                return
            except BaseException:
                _end_getitem(recorder, token, 0)
                raise
            _end_getitem(recorder, token, 1)
            yield item


class TimedCollate:
    """Times the collate function and attaches the worker's stage totals to the batch."""

    def __init__(self, collate: Callable[[list], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: Any) -> StageBatch:
        from torch.utils.data import get_worker_info

        recorder = process_recorder()
        token = _ACTIVE.set(recorder)
        before = recorder.totals.get(COLLATE, 0.0)
        recorder.push(COLLATE)
        try:
            batch = self.collate(samples)
        finally:
            recorder.pop()
            _ACTIVE.reset(token)
        recorder.note_batch(COLLATE, recorder.totals.get(COLLATE, 0.0) - before, recorder.samples)
        times, count, sample_times = recorder.take()
        info = get_worker_info()
        worker = info.id if info is not None else -1
        return StageBatch(batch, times, count, worker, time.monotonic(), sample_times)


@dataclass
class TransferTimes:
    """Worker→main transfer of one batch, in seconds."""

    serialise_cpu: float  # pickling in the worker's feeder thread (CPU time: GIL waits excluded)
    serialise_wall: float
    handoff: float  # end of collate to start of pickling (queue feeder thread wake-up)
    queue: float  # end of pickling in the worker to start of unpickling in the main process
    deserialise: float


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
    """Unpickles as the receiver's clock at the moment it is unpickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (time.monotonic, ())


def _stamp(wall: float, cpu: float) -> tuple[float, float]:
    return (wall, cpu)


def _rebuild_stage_batch(
    send_start: tuple[float, float],
    receive_start: float,
    batch: Any,
    send_end: tuple[float, float],
    times: dict[str, float],
    samples: int,
    worker: int,
    ready: float,
    sample_times: dict[str, list[float]],
) -> StageBatch:
    received = time.monotonic()
    result = StageBatch(batch, times, samples, worker, ready, sample_times)
    result.transfer = TransferTimes(
        serialise_cpu=max(0.0, send_end[1] - send_start[1]),
        serialise_wall=max(0.0, send_end[0] - send_start[0]),
        handoff=max(0.0, send_start[0] - ready),
        queue=max(0.0, receive_start - send_end[0]),
        deserialise=max(0.0, received - receive_start),
    )
    return result
