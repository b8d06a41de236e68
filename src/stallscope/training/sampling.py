"""What a :class:`~stallscope.training.watch.Watch` samples in the background while an epoch runs.

Prefetch-buffer occupancy (read from the DataLoader iterator's queues), GPU
utilisation and memory (NVML), and CPU/memory of the main process and the
workers (:class:`~stallscope.runtime.resources.ResourceSampler`). All of it
runs in daemon threads at a low rate (defaults: every 0.2 s, resources every
0.5 s), reads only, and stays off the training loop's hot path.

The loader iterator to sample is found through frameworks' wrappers by
:func:`find_loader_iterator` (Lightning's combined loader, accelerate's
lookahead generator), so the integrations sample occupancy as ``ss.watch`` does.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import Any

from torch.utils.data.dataloader import _BaseDataLoaderIter

from ..runtime.processes import worker_pids

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
    """The torch DataLoader iterator behind ``obj`` (itself, or inside a framework's wrapper), else None.

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
    """A GPU monitor: the one given (tests pass fakes), NVML when CUDA is visible, else a null monitor."""
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


class SamplingSession:
    """Background sampling while an epoch runs: occupancy + GPU in one thread, CPU/memory in a ResourceSampler.

    ``iterator`` and ``steady`` are called from the thread: the loader iterator
    being consumed (None when unknown) and whether the epoch is past its first
    batch and the warm-up (start-up is not the steady state).

    The training loop's thread only starts the thread and, at the epoch's end,
    sets an event (:meth:`stop`): setting up and shutting down the resource
    sampler happen in the background thread, so an epoch boundary costs the
    loop one thread start. :meth:`join` waits for the results (reports).
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
    ) -> None:
        self._samples, self._gpu, self._iterator, self._steady = samples, gpu, iterator, steady
        self._interval, self._resource_interval = interval, resource_interval
        self._stop = threading.Event()
        self.resources: Any = None
        self._thread = threading.Thread(target=self._run, name="stallscope-watch", daemon=True)
        self._thread.start()

    def _worker_pids(self) -> list[int]:
        iterator = self._iterator()
        return worker_pids(iterator) if iterator is not None else []

    def _run(self) -> None:
        from ..runtime.resources import ResourceSampler

        resources = ResourceSampler(self._resource_interval, uss_every=8, worker_pids=self._worker_pids, keep_ticks=True)
        self.resources = resources.start()
        while not self._stop.wait(self._interval):
            self.sample_once()
        self._samples.resources.append(resources.stop().to_dict())

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
        tick = self.resources.latest() if self.resources is not None else None
        return None if tick is None else (tick.main_cpu_percent, tick.workers_cpu_percent)

    def stop(self) -> None:
        """Ask the thread to finish (it files its resource summary); does not wait."""
        self._stop.set()

    def join(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
