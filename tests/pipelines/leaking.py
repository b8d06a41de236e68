"""Targets for the memory-drift tests: a dataset that keeps 256 KB of every sample it fetches, one
that does not, and one that reads its samples from a memory-mapped file.

The leak is a module-level list, so it grows in whichever process fetches
(each worker, or the main process with num_workers=0). The bytes are written
(``b"\\x01" * n``), so they count in RSS and USS at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

LEAK_BYTES = 256 * 1024
KEPT: list[bytes] = []


class KeepingDataset(Dataset):
    """``length`` items of shape (4,), each costing ``cost_s``; with ``leak``, each fetch keeps
    ``leak_bytes``."""

    def __init__(
        self,
        length: int = 100_000,
        cost_s: float = 0.001,
        leak: bool = True,
        leak_bytes: int = LEAK_BYTES,
    ):
        self.length, self.cost_s, self.leak, self.leak_bytes = length, cost_s, leak, leak_bytes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if self.leak:
            KEPT.append(b"\x01" * self.leak_bytes)
        time.sleep(self.cost_s)
        return torch.full((4,), float(index))


class MappedRows(Dataset):
    """Rows of ``row_bytes`` read in order from a memory-mapped file: each fetch maps pages of the
    file into the process (its RSS grows by a row) and allocates nothing that stays."""

    def __init__(self, path: Path, rows: int, row_bytes: int = 256 * 1024, cost_s: float = 0.0005):
        self.path, self.rows, self.row_bytes, self.cost_s = path, rows, row_bytes, cost_s
        self._data: np.memmap | None = None  # opened in the process that reads

    @staticmethod
    def write(path: Path, rows: int, row_bytes: int = 256 * 1024) -> None:
        with open(path, "wb") as handle:
            for _ in range(rows):
                handle.write(np.random.bytes(row_bytes))
            handle.flush()
            # On disk, as a dataset's files are: a page of the cache not yet written back is dirty,
            # and so is it where a process maps it.
            os.fsync(handle.fileno())

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int):
        if self._data is None:
            self._data = np.memmap(
                self.path, dtype=np.uint8, mode="r", shape=(self.rows, self.row_bytes)
            )
        time.sleep(self.cost_s)
        return torch.tensor([float(self._data[index].sum())])


def step(model: nn.Module, batch) -> float:
    time.sleep(0.002)
    with torch.no_grad():
        return float(model(batch).sum())


def leaking() -> dict:
    return {
        "dataset": KeepingDataset(leak=True),
        "model": nn.Linear(4, 2),
        "train_step": step,
        "batch_size": 4,
    }


def steady() -> dict:
    return {
        "dataset": KeepingDataset(leak=False),
        "model": nn.Linear(4, 2),
        "train_step": step,
        "batch_size": 4,
    }
