"""A loader whose epochs are short and whose workers are slow to start, built by a factory taking
``num_workers`` (a torchdata ``StatefulDataLoader``, which the factory cannot make persistent).

Each item waits 2 ms (a remote read): workers overlap the waits, so in steady state two workers
deliver about twice what one process does. But an epoch is 30 batches (about 0.25 s in one
process), and every worker's start-up takes 0.6 s (``worker_init_fn``: a connection opened, an
index loaded), paid again at every epoch since the workers are not persistent: per epoch, one
process delivers about twice what any number of workers does (NOTE [per-epoch rate] in
``tuning/epoch_cost.py``)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

ITEMS = 120
BATCH = 4
ITEM_WAIT_S = 0.002
WORKER_START_S = 0.6


class RemoteItems(Dataset):
    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(ITEM_WAIT_S)
        return torch.full((16,), float(index))


def _open_connection(worker_id: int) -> None:
    time.sleep(WORKER_START_S)


def make_loader(num_workers: int = 0):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(
        RemoteItems(),
        batch_size=BATCH,
        num_workers=num_workers,
        worker_init_fn=_open_connection if num_workers else None,
    )
