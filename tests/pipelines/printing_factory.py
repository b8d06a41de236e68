"""A factory that prints every time it is called, as a dataset that caches on construction does
(MONAI's CacheDataset draws a progress bar): a loader wrapper with a ``num_workers`` knob, so every
trial calls it again (NOTE [held output])."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4,), float(i * i))


class CachedLoader:
    """What a library hands back: a DataLoader inside."""

    def __init__(self, num_workers: int) -> None:
        self.loader = DataLoader(Squares(), batch_size=16, num_workers=num_workers)

    def __iter__(self):
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


def make_loader(num_workers: int = 0) -> CachedLoader:
    for percent in (25, 50, 75, 100):
        sys.stderr.write(f"\rCaching dataset: {percent}%")
    sys.stderr.write("\n")
    print("cache ready")
    return CachedLoader(num_workers)
