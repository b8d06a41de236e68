"""A loader whose iterator must be closed before its processes go (NOTE [closing iterators]).

Shaped like grain's ``DataLoader``: ``iter()`` starts producer processes and a thread that pumps
their results into a small buffer; ``close()`` asks the producers to finish, and the pump thread
ends when it reads their last message; ``__del__`` calls ``close()``, which joins the thread. Left
to the garbage collector after its processes were reaped, the join waits forever (the thread is
blocked on a queue no process will write again) — a command that does that hangs.

TARGET: ``tests/pipelines/closing_iterator.py:make_loader`` (a factory taking ``num_workers``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading

import numpy as np

ITEMS = 1 << 16
BATCH = 32


def _produce(results: mp.Queue, stop: mp.Event, worker: int, workers: int) -> None:
    for start in range(worker * BATCH, ITEMS, workers * BATCH):
        if stop.is_set():
            break
        rows = np.arange(start, min(start + BATCH, ITEMS), dtype=np.int64)
        image = np.sqrt(np.outer(rows, np.ones(256)) + 1.0).astype(np.float32)
        results.put({"image": image, "index": rows})
    results.put(None)


def _pump(results: mp.Queue, buffer: queue.Queue, running: int) -> None:
    while running:
        item = results.get()  # no timeout, as the library's own pump
        if item is None:
            running -= 1
            continue
        buffer.put(item)
    buffer.put(None)


class _Stats:
    def __init__(self, owner: ClosingIterator) -> None:
        self.owner = owner


class ClosingIterator:
    def __init__(self, workers: int) -> None:
        context = mp.get_context("fork")
        self._results: mp.Queue = context.Queue(maxsize=8)
        self._stop = context.Event()
        self._procs = [
            context.Process(target=_produce, args=(self._results, self._stop, k, workers))
            for k in range(workers)
        ]
        for proc in self._procs:
            proc.start()
        self._buffer: queue.Queue = queue.Queue(maxsize=2)
        self._closed = False
        self._owner = os.getpid()  # a forked child that inherits this object leaves it alone
        self._thread = threading.Thread(
            target=_pump, args=(self._results, self._buffer, workers), daemon=True
        )
        self._thread.start()
        self._stats = _Stats(self)  # a reference cycle: only the garbage collector frees this

    def __iter__(self) -> ClosingIterator:
        return self

    def __next__(self) -> dict:
        item = self._buffer.get()
        if item is None:
            raise StopIteration
        return item

    def close(self) -> None:
        if self._closed or os.getpid() != self._owner:
            return
        self._closed = True
        self._stop.set()
        while self._thread.is_alive():  # unblock the pump until the producers' last messages
            try:
                self._buffer.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()
        for proc in self._procs:
            proc.join()

    def __del__(self) -> None:
        self.close()


class ClosingLoader:
    def __init__(self, num_workers: int) -> None:
        self.num_workers = max(1, num_workers)

    def __iter__(self) -> ClosingIterator:
        return ClosingIterator(self.num_workers)


def make_loader(num_workers: int = 1) -> ClosingLoader:
    return ClosingLoader(num_workers)
