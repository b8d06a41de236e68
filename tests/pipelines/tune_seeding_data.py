"""Datasets holding their own RNG objects (the duplicate-stream trap seed_worker fixes)."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info


class Jitter:
    """A transform with its own random.Random, created once in __init__."""

    def __init__(self) -> None:
        self.rng = random.Random(1234)


class RngHoldingDataset(Dataset):
    """Each item: worker id, draws from a dataset-held numpy Generator, a nested random.Random,
    a torch.Generator, and the global random / numpy / torch RNGs."""

    def __init__(self, n: int = 16, *, torch_generator: bool = True) -> None:
        self.n = n
        self.gen = np.random.default_rng(0)
        self.transform = Jitter()
        # torch 2.13 cannot unpickle a torch.Generator in a spawned worker (shared-memory resize
        # error), independent of seeding: spawn tests go without it.
        self.torch_gen = torch.Generator().manual_seed(0) if torch_generator else None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        info = get_worker_info()
        return torch.tensor(
            [
                -1 if info is None else info.id,
                self.gen.random(),
                self.transform.rng.random(),
                torch.rand(1, generator=self.torch_gen).item()
                if self.torch_gen is not None
                else float(index),
                random.random(),
                np.random.rand(),
                torch.rand(1).item(),
            ],
            dtype=torch.float64,
        )
