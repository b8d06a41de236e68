"""Targets for `stallscope profile` tests: known data cost and known compute cost (sleep-based).

Classes live at module level so spawned workers can import them.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn
from torch.utils.data import Dataset


class SleepDataset(Dataset):
    """``length`` items of shape (4,), each costing ``cost_s`` seconds to fetch."""

    def __init__(
        self,
        length: int = 64,
        cost_s: float = 0.001,
        slow_rank: int | None = None,
        slow_cost_s: float = 0.0,
    ):
        self.length = length
        self.cost_s = cost_s
        self.slow_rank = slow_rank
        self.slow_cost_s = slow_cost_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        cost = self.cost_s
        if self.slow_rank is not None and int(os.environ.get("RANK", "0")) == self.slow_rank:
            cost = self.slow_cost_s
        if (
            cost > 0
        ):  # sleep(0) yields the CPU: on a loaded machine that alone can cost milliseconds
            time.sleep(cost)
        return torch.full((4,), float(index)), index % 2


class SleepStep:
    """A real model call plus ``cost_s`` of sleep: known compute.

    Forward only, without autograd: a backward pass wakes torch's thread pools,
    whose cost on a loaded 2-core machine swings by tens of milliseconds.
    """

    def __init__(self, cost_s: float):
        self.cost_s = cost_s

    def __call__(self, model: nn.Module, batch) -> float:
        x, _ = batch
        with torch.no_grad():
            out = model(x)
        time.sleep(self.cost_s)
        return float(out.sum())


def _target(dataset: Dataset, compute_s: float, batch_size: int = 4) -> dict:
    model = nn.Linear(4, 2)
    return {
        "dataset": dataset,
        "model": model,
        "train_step": SleepStep(compute_s),
        "batch_size": batch_size,
    }


def input_bound() -> dict:
    """Data 4 × 3 ms = 12 ms per batch (single process) vs 4 ms compute: stall ≈ 0.75."""
    return _target(SleepDataset(64, 0.003), 0.004)


def compute_bound() -> dict:
    """Data: collate only (~0.2 ms per batch) vs 40 ms compute: stall < 0.01."""
    return _target(SleepDataset(64, 0.0), 0.040)


def batch_only_step() -> dict:
    """train_step(batch): the model is the step's own business."""
    model = nn.Linear(4, 2)

    def step(batch):
        x, _ = batch
        with torch.no_grad():
            model(x)

    return {"dataset": SleepDataset(32, 0.0), "train_step": step, "batch_size": 4}


def no_train_step() -> dict:
    return {"dataset": SleepDataset(32, 0.0), "batch_size": 4}


def slow_rank_one() -> dict:
    """Under torchrun: rank 1's items cost 8 ms, rank 0's 0.5 ms; compute 2 ms on both."""
    return _target(SleepDataset(64, 0.0005, slow_rank=1, slow_cost_s=0.008), 0.002)


def failing_step() -> dict:
    def step(model, batch):
        raise ValueError("loss is NaN")

    return {
        "dataset": SleepDataset(32, 0.0),
        "model": nn.Linear(4, 2),
        "train_step": step,
        "batch_size": 4,
    }
