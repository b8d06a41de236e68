"""Datasets of known per-item cost for measurement tests (sleep-based: stable on a loaded machine)."""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset

COST_S = float(os.environ.get("SLEEPY_COST_S", "0.004"))


class SleepyDataset(Dataset):
    """Each item costs ``cost_s`` of sleep (releases the CPU, like waiting on storage)."""

    def __init__(self, n: int = 512, cost_s: float = COST_S, shape: tuple[int, ...] = (16,)) -> None:
        self.n = n
        self.cost_s = cost_s
        self.shape = shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.cost_s)
        return torch.full(self.shape, float(index)), index % 10


def sleepy() -> SleepyDataset:
    return SleepyDataset()


def sleepy_loader() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(SleepyDataset(), batch_size=8, num_workers=2, prefetch_factor=4)


def sleepy_dict() -> dict:
    return {"dataset": SleepyDataset(), "batch_size": 4}
