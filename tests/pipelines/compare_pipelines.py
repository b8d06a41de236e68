"""Pipelines of known cost for ``compare`` and the long-run ``watch`` tests.

``base`` sleeps ``COST_S`` per item; ``plus20`` sleeps 20% more (a change that made
every sample 20% dearer), ``twice`` twice as long. Sleep releases the CPU, so a loaded
machine changes the rates little. ``leaky``/``steady`` are datasets for the memory-drift
tests: one keeps a copy of every sample it returns, the other nothing.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from torch.utils.data import Dataset

COST_S = float(os.environ.get("COMPARE_COST_S", "0.002"))
EXTRA = 0.20  # plus20's extra cost per item, as a share of COST_S


class SleepItems(Dataset):
    """Each item sleeps ``cost_s``; ``durations`` (in-process runs) collects how long each
    really took."""

    def __init__(self, cost_s: float, n: int = 4096) -> None:
        self.cost_s, self.n = cost_s, n
        self.durations: list[float] | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        start = time.perf_counter()
        time.sleep(self.cost_s)
        item = torch.full((8,), float(index))
        if self.durations is not None:
            self.durations.append(time.perf_counter() - start)
        return item


def base() -> dict:
    return {"dataset": SleepItems(COST_S), "batch_size": 4}


def base_again() -> dict:
    """The same pipeline as ``base``, for A/A comparisons through the CLI."""
    return base()


def plus20() -> dict:
    return {"dataset": SleepItems(COST_S * (1 + EXTRA)), "batch_size": 4}


def twice() -> dict:
    """Every sample twice as dear: slower beyond doubt, however loaded the machine."""
    return {"dataset": SleepItems(COST_S * 2), "batch_size": 4}


class Leaky(Dataset):
    """Keeps every sample it returns (a cache that never stops growing): ``kb`` KiB per item."""

    def __init__(
        self, n: int = 100_000, kb: int = 64, keep: bool = True, cost_s: float = 0.0
    ) -> None:
        self.n, self.kb, self.keep, self.cost_s = n, kb, keep, cost_s
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.cost_s:
            time.sleep(self.cost_s)
        block = np.full(self.kb * 1024 // 8, float(index))  # pages written: resident at once
        if self.keep:
            self.kept.append(block)
        return torch.from_numpy(block[:8].copy())


def leaky(kb: int = 64, cost_s: float = 0.0) -> Leaky:
    return Leaky(kb=kb, cost_s=cost_s)


def steady(kb: int = 64, cost_s: float = 0.0) -> Leaky:
    return Leaky(kb=kb, keep=False, cost_s=cost_s)
