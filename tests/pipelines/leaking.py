"""Targets for the memory-drift tests: a dataset that keeps 256 KB of every sample it fetches, and
one that does not.

The leak is a module-level list, so it grows in whichever process fetches
(each worker, or the main process with num_workers=0). The bytes are written
(``b"\\x01" * n``), so they count in RSS and USS at once.
"""

from __future__ import annotations

import time

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
