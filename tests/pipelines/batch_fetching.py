"""Datasets fetched a batch at a time, as torch fetches a dataset with its own ``__getitems__``:
what it returns is handed to the collate as it is, and need not be a list (a ``TensorDict``
returns the batch itself, for a collate that expects it). One of them reads rows of a
memory-mapped file, whose pages a worker's RSS counts as it reads them."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Table(Dataset):
    """Rows of uint8 features and a label; ``__getitems__`` returns one dict of batched tensors."""

    def __init__(self, n: int = 4096, width: int = 64) -> None:
        self.x = torch.arange(n * width, dtype=torch.int64).remainder(251).to(torch.uint8)
        self.x = self.x.reshape(n, width)
        self.y = torch.arange(n) % 10

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "y": self.y[index]}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        rows = torch.as_tensor(indices)
        return {"x": self.x[rows], "y": self.y[rows]}


def to_float(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The collate of a batch-returning ``__getitems__``: it takes the batch, not a list."""
    return {"x": batch["x"].float().div_(255), "y": batch["y"]}


def make_loader(num_workers: int = 0, batch_size: int = 64) -> DataLoader:
    return DataLoader(
        Table(), batch_size=batch_size, shuffle=True, num_workers=num_workers, collate_fn=to_float
    )


class MappedRows(Table):
    """The same rows in a memory-mapped file of ``ROW_BYTES`` per row."""

    ROW_BYTES = 64 * 1024

    def __init__(self, path: str, n: int = 3072) -> None:
        self.path, self.n = path, n
        if not os.path.exists(path) or os.path.getsize(path) != n * self.ROW_BYTES:
            rows = np.lib.format.open_memmap(path, "w+", np.uint8, (n, self.ROW_BYTES))
            rows[:] = (np.arange(self.ROW_BYTES) % 251).astype(np.uint8)
            rows[:, 0] = np.arange(n) % 251
            rows.flush()
            del rows
        self.rows = np.load(path, mmap_mode="r")
        self.y = torch.arange(n) % 10

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.from_numpy(np.array(self.rows[index])), "y": self.y[index]}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return {"x": torch.from_numpy(self.rows[np.sort(indices)]), "y": self.y[indices]}


def mapped_loader(num_workers: int = 0, batch_size: int = 32) -> DataLoader:
    path = os.path.join(tempfile.gettempdir(), "stallscope-mapped-rows.npy")
    return DataLoader(
        MappedRows(path),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        collate_fn=to_float,
    )


class WideRows(Table):
    """Rows of 16 KiB fetched one at a time (no ``__getitems__``): 2 MiB float batches."""

    __getitems__ = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__(n=3072, width=16 * 1024)


def stack_to_float(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return to_float({key: torch.stack([item[key] for item in items]) for key in ("x", "y")})


def wide_loader(num_workers: int = 0, batch_size: int = 32) -> DataLoader:
    return DataLoader(
        WideRows(),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        collate_fn=stack_to_float,
    )
