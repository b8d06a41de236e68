"""Datasets of known per-item cost for measurement tests (sleep-based: stable on a
loaded machine)."""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset

COST_S = float(os.environ.get("SLEEPY_COST_S", "0.004"))


class SleepyDataset(Dataset):
    """Each item costs ``cost_s`` of sleep (releases the CPU, like waiting on storage)."""

    def __init__(
        self,
        n: int = 512,
        cost_s: float = COST_S,
        shape: tuple[int, ...] = (16,),
        log_dir: str | None = None,
    ) -> None:
        self.n = n
        self.cost_s = cost_s
        self.shape = shape
        self.log_dir = log_dir  # where each process appends the real duration of every item

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        time.sleep(self.cost_s)
        item = torch.full(self.shape, float(index)), index % 10
        if self.log_dir is not None:
            with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as log:
                log.write(f"{time.perf_counter() - start}\n")
        return item


def real_item_seconds(log_dir: str) -> float:
    """Mean real duration of the items a SleepyDataset logged, across all processes."""
    values = [
        float(line) for path in os.listdir(log_dir) for line in open(os.path.join(log_dir, path))
    ]
    return sum(values) / len(values)


def sleepy() -> SleepyDataset:
    return SleepyDataset()


def sleepy_loader() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        SleepyDataset(), batch_size=8, num_workers=2, prefetch_factor=4
    )


def sleepy_dict() -> dict:
    return {"dataset": SleepyDataset(), "batch_size": 4}
