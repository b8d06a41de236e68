"""Small real pipelines for the tuner's tests (module-level classes: importable by
spawned workers)."""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset


class WaitingDataset(Dataset):
    """Each item sleeps ``wait_s`` (like a remote read) and does a little CPU work."""

    def __init__(self, n: int = 256, wait_s: float = 0.004, width: int = 16) -> None:
        self.n = n
        self.wait_s = wait_s
        self.width = width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        return torch.full((self.width,), float(index)), index % 7


class ArrayDataset(Dataset):
    """An in-memory NumPy-backed dataset written as ``self.x[i]`` (so an index array works too)."""

    def __init__(self, n: int = 4096, width: int = 8) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.random((n, width), dtype=np.float32)
        self.y = np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


def waiting() -> WaitingDataset:
    return WaitingDataset()


def waiting_loader() -> DataLoader:
    return DataLoader(WaitingDataset(), batch_size=8, num_workers=1)


def tensors() -> dict:
    return {"dataset": TensorDataset(torch.randn(4096, 8), torch.arange(4096)), "batch_size": 64}


class ReplayingStream(IterableDataset):
    """An IterableDataset that does not shard by worker: every worker would replay it all."""

    def __init__(self, n: int = 100_000) -> None:
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(0.0002)
            yield torch.tensor([float(i)])


# -- issue 10: slow loaders, slow worker start-up ---------------------------------------------


def slow_loader() -> DataLoader:
    """0.3 s per batch of 8 in one process (a remote read per item): a 20 s budget fits only a
    few windows."""
    return DataLoader(WaitingDataset(n=256, wait_s=0.3 / 8), batch_size=8, num_workers=0)


def sleepy_worker_init(worker_id: int) -> None:
    """A worker that takes 0.3 s to get ready (opening files, loading an index, importing
    a library)."""
    time.sleep(0.3)


def slow_start_loader() -> DataLoader:
    """Two workers, each 0.3 s to start: what persistent_workers saves at every epoch boundary."""
    return DataLoader(
        WaitingDataset(n=64, wait_s=0.002),
        batch_size=8,
        num_workers=2,
        worker_init_fn=sleepy_worker_init,
    )
