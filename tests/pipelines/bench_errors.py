"""Broken pipelines: each must give one sentence and exit code 2, never a hang or a traceback."""

from __future__ import annotations

import os
import signal

import numpy as np
import torch
from torch.utils.data import Dataset


class Sized(Dataset):
    def __init__(self, n: int = 64) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(4)


def empty() -> Dataset:
    return Sized(0)


def tiny() -> dict:
    return {"dataset": Sized(10), "batch_size": 32}


def raises_on_call() -> Dataset:
    raise RuntimeError("cannot open the annotation file")


def not_a_dataset() -> int:
    return 42


def needs_args(root: str) -> Dataset:
    return Sized()


class RaisesAt(Sized):
    def __init__(self, bad: int) -> None:
        super().__init__(256)
        self.bad = bad

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad:
            raise ValueError(f"corrupt record {index}")
        return torch.zeros(4)


def raises_first() -> Dataset:
    return RaisesAt(0)


def raises_later() -> Dataset:
    return RaisesAt(200)


class Ragged(Sized):
    def __getitem__(self, index: int) -> np.ndarray:
        return np.zeros(3 + index % 5, dtype=np.float32)


def ragged() -> Dataset:
    return Ragged()


class DiesInWorker(Sized):
    def __init__(self) -> None:
        super().__init__(256)
        self.parent = os.getpid()

    def __getitem__(self, index: int) -> torch.Tensor:
        if os.getpid() != self.parent and index >= 100:
            os._exit(3)  # a segfault-like death: no Python exception to forward
        return torch.zeros(4)


def dies_in_worker() -> Dataset:
    return DiesInWorker()


class KilledInWorker(DiesInWorker):
    def __getitem__(self, index: int) -> torch.Tensor:
        if os.getpid() != self.parent and index >= 100:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer does
        return torch.zeros(4)


def killed_in_worker() -> Dataset:
    return KilledInWorker()


class RaisesAlways(Sized):
    def __getitem__(self, index: int) -> torch.Tensor:
        raise OSError(f"cannot read shard for record {index}")


def step(batch: torch.Tensor) -> None:
    pass


def raises_always() -> dict:
    """Every item raises; a train_step too, so that profile gets as far as fetching."""
    return {"dataset": RaisesAlways(), "batch_size": 8, "train_step": step}
