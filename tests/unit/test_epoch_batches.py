"""An epoch's batches, and the worker counts a sweep tries by default (none above them)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from stallscope.target import load_target
from stallscope.throughput.sweep import default_worker_counts


class Items(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index])


class Stream(IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([i]) for i in range(10))


@pytest.mark.parametrize(
    ("loader", "batches"),
    [
        (DataLoader(Items(200), batch_size=32), 7),  # the last batch short
        (DataLoader(Items(200), batch_size=32, drop_last=True), 6),
        (DataLoader(Items(64), batch_size=32), 2),
        (
            DataLoader(
                Items(50), batch_sampler=BatchSampler(SequentialSampler(range(50)), 10, False)
            ),
            5,
        ),
        (DataLoader(Stream(), batch_size=4), None),  # unsized: no epoch to cap at
    ],
)
def test_batches_per_epoch_is_the_users_loaders(loader, batches):
    assert load_target(loader).batches_per_epoch() == batches


def test_default_worker_counts_stop_at_the_epochs_batches():
    assert default_worker_counts(2) == [0, 1, 2, 4, 8]
    assert default_worker_counts(2, epoch_batches=None) == [0, 1, 2, 4, 8]
    assert default_worker_counts(16, epoch_batches=7) == [0, 1, 2, 7]
    assert default_worker_counts(2, epoch_batches=7) == [0, 1, 2, 4, 7]
    assert default_worker_counts(4, epoch_batches=100) == [0, 1, 2, 4, 8, 16]
    assert default_worker_counts(4, epoch_batches=1) == [0, 1]
    assert default_worker_counts(4, epoch_batches=0) == [0, 1]  # drop_last left no whole batch
