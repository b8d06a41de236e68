"""A dataset whose library runs its work on an engine thread, started at first use in a process
(as Daft's event loop or a Rust runtime's pool is): a request is queued to that thread and waits
for its reply. A worker forked from a process that has used the dataset inherits the engine's
state but not its thread, so its first request waits forever; a worker forked from a process that
never used it starts an engine of its own and runs.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset


class Engine:
    """One per process that used it: a thread that runs the requests put on its queue."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.requests: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        threading.Thread(target=self._serve, name="engine-loop", daemon=True).start()

    def _serve(self) -> None:
        while True:
            work, reply = self.requests.get()
            try:
                reply.put((True, work()))
            except Exception as exc:  # handed back to the caller, as an engine's futures do
                reply.put((False, exc))

    def run(self, work: Callable[[], Any]) -> Any:
        reply: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self.requests.put((work, reply))
        ok, value = reply.get()  # in a process forked after first use, nobody answers
        if not ok:
            raise value
        return value


_engine: Engine | None = None


def engine() -> Engine:
    global _engine
    if _engine is None:  # started once, at first use; a fork copies the object, not its thread
        _engine = Engine()
    return _engine


class EngineRows(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> torch.Tensor:
        return engine().run(lambda: torch.full((8,), float(index)))


def make_loader(num_workers: int = 0, batch_size: int = 16) -> DataLoader:
    return DataLoader(EngineRows(), batch_size=batch_size, num_workers=num_workers)


class EngineStream(IterableDataset):
    """The same engine behind a stream that, like Daft's ``to_torch_iter_dataset()``, does not
    split itself among workers: each worker yields every row."""

    def __iter__(self):
        for index in range(64):
            yield engine().run(lambda index=index: torch.full((8,), float(index)))


def make_stream_loader(num_workers: int = 0, batch_size: int = 16) -> DataLoader:
    return DataLoader(EngineStream(), batch_size=batch_size, num_workers=num_workers)
