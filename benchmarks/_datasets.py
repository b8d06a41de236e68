"""Datasets of known cost shared by the benchmark scripts (module level: spawn-safe)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SleepCost(Dataset):
    """Waits ``cost_s`` per item without using the CPU (storage / network latency)."""

    def __init__(self, cost_s: float, n: int = 4096) -> None:
        self.cost_s = cost_s
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.cost_s)
        return torch.zeros(8)


class SpinCost(Dataset):
    """Burns ``cost_s`` of CPU per item, holding the GIL (pure-Python decode/augment)."""

    def __init__(self, cost_s: float, n: int = 4096) -> None:
        self.cost_s = cost_s
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        end = time.thread_time() + self.cost_s
        while time.thread_time() < end:
            pass
        return torch.zeros(8)
