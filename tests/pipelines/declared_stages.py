"""Graph and pool pipelines with known per-stage costs, for the stages they declare (NOTE
[declared stages] in stallscope/breakdown/declared.py) and the process-tree checks.

Each cost is a sleep plus a short busy loop, so it holds on a loaded machine:

* :func:`nodes_threads` / :func:`nodes_processes` — a ``torchdata.nodes`` graph: sampler →
  ``ParallelMapper(decode, 4 workers)`` → ``Batcher(8)`` → ``Mapper(collate)`` → ``Loader``.
  decode costs ``DECODE_S`` per item, collate ``COLLATE_S`` per batch.
* :func:`pool_pipeline` — a class whose ``__iter__`` maps ``self.decode`` then
  ``self.augment`` over the indices with a ``ThreadPoolExecutor`` and batches them with
  ``self.collate``: decode ``DECODE_S``, augment ``AUGMENT_S`` per item, collate ``COLLATE_S``
  per batch.
* :func:`mpire_pipeline` — the same stages mapped by mpire's ``WorkerPool`` with threads (a
  thread-pool pipeline library, installed by the ``loaders`` extra).
* :func:`leaking_pool` — the same pipeline keeping every decoded item on ``self`` (memory grows
  every epoch).
* :func:`process_pool_loader` — a loader that starts its own ``multiprocessing.Pool`` in the
  main process and burns CPU in it: its CPU is the loader's.
* :func:`epoch_pool_loader` — the same work in a pool opened for each epoch and closed at its
  end, with short epochs (as grain's ``DataLoader`` starts its worker processes per iterator):
  the loader's processes end inside any measurement window.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

ITEMS = 1024  # 128 batches an epoch: a measurement window stays inside one
BATCH = 8
DECODE_S = 0.012
AUGMENT_S = 0.004
COLLATE_S = 0.002


def _cost(seconds: float) -> None:
    """``seconds`` of wall time: most of it asleep, the last millisecond busy."""
    end = time.perf_counter() + seconds
    time.sleep(max(0.0, seconds - 0.001))
    while time.perf_counter() < end:
        pass


def decode(index: int) -> np.ndarray:
    _cost(DECODE_S)
    return np.full((3, 16, 16), index % 251, dtype=np.uint8)


def collate(items: list[np.ndarray]) -> torch.Tensor:
    _cost(COLLATE_S)
    return torch.from_numpy(np.stack(items))


def _graph(method: str, workers: int = 4):
    import torchdata.nodes as tn
    from torch.utils.data import SequentialSampler

    node = tn.SamplerWrapper(SequentialSampler(range(ITEMS)))
    node = tn.ParallelMapper(node, map_fn=decode, num_workers=workers, method=method)
    node = tn.Batcher(node, batch_size=BATCH, drop_last=True)
    node = tn.Mapper(node, collate)
    return tn.Loader(node)


def nodes_threads():
    return _graph("thread")


def nodes_processes():
    return _graph("process", workers=2)


class PoolPipeline:
    """Decodes and augments items in a thread pool, batches them in the main thread."""

    def __init__(self, items: int = ITEMS, batch_size: int = BATCH, threads: int = 4) -> None:
        self.items = items
        self.batch_size = batch_size
        self.threads = threads

    def decode(self, index: int) -> np.ndarray:
        return decode(index)

    def augment(self, item: np.ndarray) -> np.ndarray:
        _cost(AUGMENT_S)
        return item[:, ::-1].copy()

    def prepare(self, index: int) -> np.ndarray:
        return self.augment(self.decode(index))

    def collate(self, items: list[np.ndarray]) -> torch.Tensor:
        return collate(items)

    def __iter__(self):
        with ThreadPoolExecutor(self.threads) as pool:
            chunk: list[np.ndarray] = []
            for item in pool.map(self.prepare, range(self.items)):
                chunk.append(item)
                if len(chunk) == self.batch_size:
                    yield self.collate(chunk)
                    chunk = []


def pool_pipeline() -> PoolPipeline:
    return PoolPipeline()


class MpirePipeline(PoolPipeline):
    """The same stages mapped by mpire's ``WorkerPool`` (a thread-pool pipeline library) with
    threads."""

    def __iter__(self):
        from mpire import WorkerPool

        with WorkerPool(n_jobs=self.threads, start_method="threading") as pool:
            chunk: list[np.ndarray] = []
            for item in pool.imap(self.prepare, range(self.items)):
                chunk.append(item)
                if len(chunk) == self.batch_size:
                    yield self.collate(chunk)
                    chunk = []


def mpire_pipeline() -> MpirePipeline:
    return MpirePipeline()


class LeakingPool(PoolPipeline):
    """Keeps every decoded item (256 KB each) for good: memory grows by ~8 MB per epoch."""

    def __init__(self) -> None:
        super().__init__(items=32, batch_size=8, threads=2)
        self.kept: list[np.ndarray] = []

    def decode(self, index: int) -> np.ndarray:
        self.kept.append(np.ones(256 * 1024, dtype=np.uint8))
        return np.full((3, 16, 16), index % 251, dtype=np.uint8)

    def augment(self, item: np.ndarray) -> np.ndarray:
        return item


def leaking_pool() -> LeakingPool:
    return LeakingPool()


def flat_pool() -> PoolPipeline:
    """The same pipeline shape, keeping nothing: memory flat over epochs."""
    pipeline = PoolPipeline(items=32, batch_size=8, threads=2)
    pipeline.augment = lambda item: item  # type: ignore[method-assign]
    pipeline.decode = lambda index: np.full((3, 16, 16), index % 251, dtype=np.uint8)  # type: ignore[method-assign]
    return pipeline


def _burn(index: int) -> int:
    end = time.process_time() + 0.02
    value = index
    while time.process_time() < end:
        value = (value * 31 + 7) % 1_000_003
    return value


class ProcessPoolLoader:
    """Batches made in a ``multiprocessing.Pool`` of its own (2 processes, 20 ms of CPU per
    item), started on the first epoch and kept for the next ones, as an engine keeps its
    workers."""

    def __init__(self, batches: int = 30, batch_size: int = 4) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.pool = None

    def __iter__(self):
        if self.pool is None:
            self.pool = multiprocessing.get_context("fork").Pool(2)
        for b in range(self.batches):
            start = b * self.batch_size
            values = self.pool.map(_burn, range(start, start + self.batch_size))
            yield torch.tensor(values)


def process_pool_loader() -> ProcessPoolLoader:
    return ProcessPoolLoader()


class EpochPoolLoader(ProcessPoolLoader):
    """A ``multiprocessing.Pool`` of 2 processes for each epoch of 4 batches, closed when the
    epoch ends: 20 ms of CPU per item, all of it in processes that end within a second."""

    def __init__(self) -> None:
        super().__init__(batches=4, batch_size=4)

    def __iter__(self):
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for b in range(self.batches):
                start = b * self.batch_size
                yield torch.tensor(pool.map(_burn, range(start, start + self.batch_size)))
            pool.close()
            pool.join()


def epoch_pool_loader() -> EpochPoolLoader:
    return EpochPoolLoader()
