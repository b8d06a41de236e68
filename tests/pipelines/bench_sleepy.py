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
        # Where each process appends every item it made: its index and when it began and ended
        # (perf_counter, one clock for every process on the machine).
        self.log_dir = log_dir

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        time.sleep(self.cost_s)
        item = torch.full(self.shape, float(index)), index % 10
        if self.log_dir is not None:
            with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as log:
                log.write(f"{index} {start} {time.perf_counter()}\n")
        return item


def logged_items(log_dir: str) -> list[tuple[int, float, float]]:
    """Every item a SleepyDataset logged, in any process: (index, start, end)."""
    items = []
    for path in os.listdir(log_dir):
        with open(os.path.join(log_dir, path)) as log:
            for line in log:
                index, start, end = line.split()
                items.append((int(index), float(start), float(end)))
    return items


def real_item_seconds(log_dir: str) -> float:
    """Mean real duration of the items a SleepyDataset logged, across all processes."""
    items = logged_items(log_dir)
    return sum(end - start for _, start, end in items) / len(items)


def made_between(log_dir: str, start: float, end: float) -> int:
    """How many items the processes finished within ``(start, end]`` (perf_counter)."""
    return sum(start < done <= end for _, _, done in logged_items(log_dir))


def sleepy() -> SleepyDataset:
    return SleepyDataset()


def sleepy_loader() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        SleepyDataset(), batch_size=8, num_workers=2, prefetch_factor=4
    )


def sleepy_dict() -> dict:
    return {"dataset": SleepyDataset(), "batch_size": 4}
