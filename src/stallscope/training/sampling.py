"""What a :class:`~stallscope.training.watch.Watch` samples in the background while an epoch runs.

Prefetch-buffer occupancy (read from the DataLoader iterator's queues), GPU
utilisation and memory (NVML), and CPU/memory of the main process and the
workers (:class:`~stallscope.runtime.resources.ResourceSampler`). All of it
runs in one daemon thread per watch, only while an epoch runs, at a low rate
(defaults: every 0.2 s, resources every 0.5 s of epochs); it reads only, and
stays off the training loop's hot path. A single-process loader without a
GPU needs no thread (NOTE [sampler and the GIL]).

NOTE [sampler and the GIL]
    The sampler's cost to the training loop is not its CPU (a fraction of a
    percent of a core) but its GIL hand-overs. Every time a sampler thread
    wakes, and every time it returns from a blocking call (opening or reading
    a /proc file), it must take the GIL from a loop that is running Python
    code: the loop stops, and waits to be woken again when the sampler lets
    go. On the 2-core reference VM, with a loop of 0.37 ms steps, a thread
    waking every 10 ms to do nothing cost 114-235 µs per wake-up, and one
    reading CPU and RSS through psutil (a file opened, read and closed per
    figure) 600-990 µs (benchmarks/gil_handover.py and a draft of it). So a sampler
    thread wakes as little as it can: not between epochs, and it reads this
    process without opening files
    (:class:`~stallscope.runtime.resources.ResourceSampler`). With a
    single-process loader and no GPU there is nothing for a thread to wait
    on, so there is no thread: the watch reads CPU and RSS itself, on the
    loop's thread, at a step due about every ``resource_interval`` seconds
    (a few µs, no hand-over; :func:`needs_thread`).
    benchmarks/watch_overhead.py measures the whole.

The loader iterator to sample is found through frameworks' wrappers by
:func:`find_loader_iterator` (Lightning's combined loader, accelerate's
lookahead generator), so the integrations sample occupancy as ``ss.watch`` does.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from array import array
from collections.abc import Callable
from typing import Any

from torch.utils.data.dataloader import _BaseDataLoaderIter

from ..runtime.processes import worker_pids
from ..runtime.resources import ResourceSampler, window_clocks

# How deep find_loader_iterator looks through wrappers (combined loader -> mode iterator -> list).
_SEARCH_DEPTH = 4


def prefetch_occupancy(iterator: Any) -> tuple[int, int] | None:
    """``(ready, capacity)`` of a multi-process DataLoader iterator's prefetch buffer.

    ready = batches the workers have finished that the main process has not
    consumed yet: items in the worker result queue (and in the pin-memory
    thread's queue) plus batches that arrived out of order and wait in
    ``_task_info``. capacity = ``prefetch_factor × num_workers`` (the most
    batches torch keeps in flight). Read-only and defensive: None for a
    single-process iterator, a shut-down one, a platform where
    ``Queue.qsize()`` is not implemented (macOS), or a torch whose internals
    differ (verified on torch 2.13).
    """
    try:
        workers = int(getattr(iterator, "_num_workers", 0) or 0)
        factor = int(getattr(iterator, "_prefetch_factor", 0) or 0)
        if workers <= 0 or factor <= 0 or getattr(iterator, "_shutdown", False):
            return None
        capacity = workers * factor
        result_queue = iterator._worker_result_queue
        ready = int(result_queue.qsize())
        data_queue = getattr(iterator, "_data_queue", result_queue)
        if data_queue is not result_queue:  # pin_memory: a thread moves batches to a second queue
            ready += int(data_queue.qsize())
        # C-level copy: atomic under the GIL while the main thread mutates the dict.
        infos = list(getattr(iterator, "_task_info", {}).values())
        ready += sum(1 for info in infos if len(info) == 2)
    except Exception:  # NotImplementedError (macOS qsize), a closed queue, changed internals
        return None
    return min(ready, capacity), capacity


def find_loader_iterator(obj: Any, depth: int = _SEARCH_DEPTH) -> Any:
    """The torch DataLoader iterator behind ``obj`` (itself, or inside a framework's wrapper), else
    None.

    Looks through what wraps it in the frameworks we integrate with, read-only:
    an ``_iterator``/``iterators`` attribute (Lightning's ``CombinedLoader``
    and its mode iterators) and a generator's local variables (accelerate's
    ``DataLoaderShard`` iterates the DataLoader inside a generator, one batch
    ahead). Used once per epoch, never per step.
    """
    if obj is None or depth < 0:
        return None
    if isinstance(obj, _BaseDataLoaderIter):
        return obj
    candidates: list[Any] = []
    inner = getattr(obj, "_iterator", None)
    if inner is not None and inner is not obj:
        candidates.append(inner)
    candidates.extend(getattr(obj, "iterators", None) or [])
    frame = getattr(obj, "gi_frame", None)
    if frame is not None:
        candidates.extend(frame.f_locals.values())
    for candidate in candidates:
        found = find_loader_iterator(candidate, depth - 1)
        if found is not None:
            return found
    return None


def open_gpu(spec: Any) -> Any:
    """A GPU monitor: the one given (tests pass fakes), NVML when CUDA is visible, else a null
    monitor."""
    from ..runtime.gpu import NullGpuMonitor, open_gpu_monitor

    if spec is False:
        return NullGpuMonitor("GPU sampling turned off (gpu=False)")
    if spec is not None:
        return spec
    try:
        import torch

        if not torch.cuda.is_available():
            return NullGpuMonitor("torch sees no CUDA device")
    except Exception:
        return NullGpuMonitor("torch.cuda unavailable")
    return open_gpu_monitor()


def needs_thread(gpu: Any, iterator: Any) -> bool:
    """Whether sampling needs a thread: a GPU to read, workers (their buffer, their CPU), or an
    iterator not known yet.

    A single-process DataLoader on a machine without a GPU has none of them:
    its resources are read on the loop's own thread, every half second of
    steps, and no sampler thread wakes to take the GIL from the loop
    (NOTE [sampler and the GIL]).
    """
    if gpu is not None and getattr(gpu, "available", True):
        return True
    if not isinstance(iterator, _BaseDataLoaderIter):
        return True
    return int(getattr(iterator, "_num_workers", 0) or 0) > 0


class Samples:
    """What the background threads collected over the whole run (all epochs)."""

    def __init__(self) -> None:
        self.occupancy_ready = array("l")
        self.occupancy_capacity: int | None = None
        self.gpu_util = array("d")
        self.gpu_memory_max = 0.0
        self.gpu_memory_total: float | None = None
        self.resources: list[dict[str, Any]] = []  # one summary per sampling session (epoch)

    def latest_buffer(self) -> tuple[int, int] | None:
        if self.occupancy_ready and self.occupancy_capacity:
            return self.occupancy_ready[-1], self.occupancy_capacity
        return None

    def latest_gpu_util(self) -> float | None:
        return self.gpu_util[-1] if self.gpu_util else None


# Steps after an epoch's start at which the first inline resource reading is due (then every
# ~resource_interval).
FIRST_INLINE_TICK = 16


class InlineReadings:
    """CPU and RSS read on the training loop's own thread, where no sampler thread is needed (NOTE
    [sampler and the GIL]).

    The watch's hot path only compares its step count with the step at which
    the next reading is due: :meth:`begin` and :meth:`tick` return it, about
    ``resource_interval`` ahead at the loop's recent pace.
    """

    def __init__(self, resource_interval: float, *, on_tick: Callable[[float, Any], Any]) -> None:
        self.resource_interval = resource_interval
        self._sampler = ResourceSampler(
            resource_interval, uss_every=8, worker_pids=list, keep_ticks=False, on_tick=on_tick
        )
        self._latest = (0.0, 0)  # (time, step) of the latest reading

    def begin(self, step: int) -> int:
        """An epoch starts at ``step``; the step at which the first reading is due."""
        at = window_clocks()
        self._sampler.begin(at=at)
        self._latest = (at[0], step)
        return step + FIRST_INLINE_TICK

    def tick(self, step: int) -> int:
        """Read CPU and RSS now; the step at which the next reading is due."""
        self._sampler.sample()
        now = time.perf_counter()
        then, at = self._latest
        self._latest = (now, step)
        rate = (step - at) / (now - then) if now > then else 0.0
        return (
            step + max(1, int(rate * self.resource_interval))
            if rate > 0
            else step + FIRST_INLINE_TICK
        )

    def finish(self) -> dict[str, Any]:
        """The epoch ended: its resource summary (``ResourceSummary.to_dict()``)."""
        return self._sampler.finish(at=window_clocks()).to_dict()

    def latest_cpu(self) -> tuple[float, float] | None:
        return self._sampler.latest_cpu()


class BackgroundSampler:
    """One thread per :class:`~stallscope.training.watch.Watch` that samples while epochs run.

    Started at the watch's first epoch and kept for its life: an epoch
    boundary costs the training loop two clock reads, a lock and a notify
    (:meth:`begin_epoch`, :meth:`end_epoch`), not a thread start. Between
    epochs the thread sleeps on a condition and wakes nobody
    (NOTE [sampler and the GIL]).

    Per epoch it keeps a :class:`~stallscope.runtime.resources.ResourceSampler`
    window, filed into ``samples.resources`` when the epoch is over (the
    workers' last CPU figures are read before they exit): the per-epoch CPU
    and memory figures. The window's span and the main process's CPU come
    from the clocks read by the loop at the boundaries, so they are exact
    however late the thread gets to them. :meth:`settle` waits for the filing.

    The sampling clocks run on time spent inside epochs: a sample is due after
    ``interval`` seconds of epochs (resources after ``resource_interval``),
    however the epochs are cut, and nothing is sampled between them.

    ``iterator`` and ``steady`` are called from the thread: the loader iterator
    being consumed (None when unknown) and whether the epoch is past its first
    batch and the warm-up (start-up is not the steady state). They must not
    keep the watch alive: the thread ends when it is closed or garbage-collected.
    """

    def __init__(
        self,
        samples: Samples,
        gpu: Any,
        *,
        iterator: Callable[[], Any],
        steady: Callable[[], bool],
        interval: float,
        resource_interval: float,
        on_tick: Callable[[float, Any], None] | None = None,
    ) -> None:
        self._samples, self._gpu, self._iterator, self._steady = samples, gpu, iterator, steady
        self._on_tick = on_tick  # each resource reading, for the watch's time windows
        self._interval, self._resource_interval = interval, resource_interval
        self._cond = threading.Condition(threading.Lock())
        # Written by the loop's thread under the lock:
        self._epoch = 0  # epochs begun
        self._running = False  # an epoch is in progress
        self._begun_at = (
            0.0,
            0.0,
        )  # (perf_counter, process CPU seconds) at the latest epoch's start
        self._ended_at = (0.0, 0.0)  # ... at the latest epoch's end
        self._closed = False
        # Written by the sampler's thread under the lock:
        self._filed = 0  # epochs up to this one are filed (or were too short to be seen)
        self._asleep = False  # waiting for an epoch to begin
        self.resources: Any = None  # the ResourceSampler (one window per epoch)
        self._thread = threading.Thread(target=self._run, name="stallscope-watch", daemon=True)
        self._thread.start()

    # -- the training loop's side --------------------------------------------------------
    def begin_epoch(self) -> None:
        at = window_clocks()
        with self._cond:
            self._epoch += 1
            self._running = True
            self._begun_at = at
            if self._asleep:
                self._cond.notify_all()

    def end_epoch(self) -> None:
        """The epoch is over; its results are filed in the background (:meth:`settle` waits for
        them)."""
        at = window_clocks()
        with self._cond:
            self._running = False
            self._ended_at = at
            self._cond.notify_all()

    def settle(self, timeout: float = 5.0) -> None:
        """Wait until the results of every ended epoch are filed (before reporting)."""
        with self._cond:
            self._cond.wait_for(self._settled, timeout)

    def _settled(self) -> bool:
        if self._closed or (self._asleep and not self._running):
            return True
        return self._filed >= self._epoch - (1 if self._running else 0)

    def close(self, timeout: float = 5.0) -> None:
        """End the epoch in progress, file it and end the thread."""
        self.shutdown()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def shutdown(self) -> None:
        """Ask the thread to end (files the epoch in progress); does not wait. Safe from a
        finaliser."""
        at = window_clocks()
        with self._cond:
            if self._running:
                self._running, self._ended_at = False, at
            self._closed = True
            self._cond.notify_all()

    # -- the thread ----------------------------------------------------------------------
    def _worker_pids(self) -> list[int] | None:
        """The consumed iterator's worker pids; None while the iterator is not known (then every
        child counts)."""
        iterator = self._iterator()
        return worker_pids(iterator) if isinstance(iterator, _BaseDataLoaderIter) else None

    def _run(self) -> None:
        # No tick list: an epoch can stay open for days; the windows get every reading through
        # on_tick.
        self.resources = ResourceSampler(
            self._resource_interval,
            uss_every=8,
            worker_pids=self._worker_pids,
            keep_ticks=False,
            on_tick=self._on_tick,
        )
        cond = self._cond
        window = 0  # the epoch whose window is open (0: none)
        due_sample, due_resources = (
            self._interval,
            self._resource_interval,
        )  # seconds of epochs until due
        useful = True
        while True:
            if (
                not window
            ):  # nothing open: record what is filed, sleep until an epoch runs, open its window
                with cond:
                    self._filed = self._epoch - (1 if self._running else 0)
                    cond.notify_all()
                    self._asleep = True
                    cond.wait_for(lambda: self._running or self._closed)
                    self._asleep = False
                    if not self._running:
                        return
                    window, begun = self._epoch, self._begun_at
                self.resources.begin(at=begun)
                useful = self._anything_to_sample()
            waited = time.perf_counter()
            with cond:
                cond.wait_for(
                    functools.partial(self._over, window),
                    min(due_sample if useful else math.inf, due_resources),
                )
                over, running = self._over(window), self._running
                ended, begun = self._ended_at, self._begun_at
            now = time.perf_counter()
            inside = now - waited
            if over:  # the time since the epoch ended (up to a new one's start) was not an epoch's
                inside -= max(0.0, min(now, begun[0] if running else now) - max(waited, ended[0]))
            due_sample, due_resources = due_sample - inside, due_resources - inside
            if over:
                self._samples.resources.append(self.resources.finish(at=ended).to_dict())
                window = (
                    0  # filed; a next epoch that already runs is opened at once, without sleeping
                )
                continue
            if useful and due_sample <= 0:
                self.sample_once()
                due_sample = self._interval
            if due_resources <= 0:
                self.resources.sample()
                due_resources = self._resource_interval
                useful = self._anything_to_sample()

    def _over(self, window: int) -> bool:
        """Whether epoch ``window`` has ended (under the lock)."""
        return self._closed or not self._running or self._epoch != window

    def _anything_to_sample(self) -> bool:
        return needs_thread(self._gpu, self._iterator())

    def sample_once(self) -> None:
        if not self._steady():
            return  # waiting for the epoch's first batch (workers starting) or warming up
        samples = self._samples
        occupancy = prefetch_occupancy(self._iterator())
        if occupancy is not None:
            samples.occupancy_ready.append(occupancy[0])
            samples.occupancy_capacity = occupancy[1]
        gpu = self._gpu.sample() if self._gpu is not None else None
        if gpu is not None:
            samples.gpu_util.append(gpu.util_percent)
            samples.gpu_memory_max = max(samples.gpu_memory_max, gpu.memory_used_mb)
            samples.gpu_memory_total = gpu.memory_total_mb

    def latest_cpu(self) -> tuple[float, float] | None:
        resources = self.resources
        return resources.latest_cpu() if resources is not None else None


def none() -> None:
    """What an iterator reference without an iterator returns."""
    return None


def weak_getter(obj: Any) -> Callable[[], Any]:
    """A weak reference where possible: holding the iterator would keep a broken-out epoch's workers
    alive."""
    if obj is None:
        return none
    try:
        return weakref.ref(obj)
    except TypeError:  # e.g. a generator-like object without weakref support
        return none
