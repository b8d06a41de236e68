"""Factories that take knobs and return a plain DataLoader (NOTE [a DataLoader's factory]): the
advice is a call to them, checked against what they build."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3,), float(index * index))


def make_loader(num_workers: int = 0, batch_size: int = 8) -> DataLoader:
    """The usual training-script factory."""
    return DataLoader(Squares(), batch_size=batch_size, shuffle=True, num_workers=num_workers)


def derived_loader(num_workers: int = 0) -> DataLoader:
    """Derives persistent_workers from num_workers: its call builds more than the trial set."""
    return DataLoader(
        Squares(), batch_size=8, num_workers=num_workers, persistent_workers=num_workers > 0
    )


def ignoring_loader(num_workers: int = 0) -> DataLoader:
    """Takes num_workers and never passes it on."""
    return DataLoader(Squares(), batch_size=8)


def workers_loader(num_workers: int = 2, batch_size: int = 8) -> DataLoader:
    """Two persistent workers by default, persistent only with workers: the shape of
    OpenMMLab's ``Runner.build_dataloader`` configs and many training scripts."""
    return DataLoader(
        Squares(),
        batch_size=batch_size,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
