"""Datasets of known CPU and wall cost per item, for the CPU-cost probe (issue 18)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class BurnDataset(Dataset):
    """Each item burns ``cpu_s`` of this thread's CPU time (a busy loop on the thread clock)."""

    def __init__(self, cpu_s: float = 0.002, length: int = 4096):
        self.cpu_s, self.length = cpu_s, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        return torch.full((8,), float(index))


class SleepDataset(Dataset):
    """Each item sleeps ``wall_s``: wall time without CPU (a remote read)."""

    def __init__(self, wall_s: float = 0.005, length: int = 4096):
        self.wall_s, self.length = wall_s, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        time.sleep(self.wall_s)
        return torch.full((8,), float(index))


def burn() -> dict:
    return {"dataset": BurnDataset(), "batch_size": 8}


def sleepy() -> dict:
    return {"dataset": SleepDataset(), "batch_size": 8}
