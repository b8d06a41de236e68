"""Pipelines that fail at one worker count only: a config of the sweep fails, the user's own does
not (NOTE [failed configs] in ``throughput/sweep.py``).

* :func:`raises_at_two_workers` — a map-style dataset whose items raise in worker processes when
  the loader runs 2 of them (``torch.utils.data.get_worker_info().num_workers == 2``), as a
  dataset that opens a per-worker resource a quota refuses past one may do.
* :func:`dies_at_two_workers` — the same, but the worker exits without a Python exception.
* :func:`loader_raising_at_two_workers` — a DataLoader with ``num_workers=2`` over the first: the
  user's own config fails, so the pipeline itself is broken.

Each worker writes its pid into ``$WORKER_PID_DIR`` when that is set, so a test can check that no
worker outlived the command.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class FailsAtTwoWorkers(Dataset):
    def __init__(self, n: int = 512, *, die: bool = False) -> None:
        self.n = n
        self.die = die

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        info = get_worker_info()
        if info is not None:
            folder = os.environ.get("WORKER_PID_DIR")
            if folder:
                Path(folder, str(os.getpid())).touch()
            if info.num_workers == 2:
                if self.die:
                    os._exit(3)
                raise OSError(f"per-worker handle refused for record {index}")
        return torch.full((8,), float(index))


def raises_at_two_workers() -> Dataset:
    return FailsAtTwoWorkers()


def dies_at_two_workers() -> Dataset:
    return FailsAtTwoWorkers(die=True)


def loader_raising_at_two_workers() -> DataLoader:
    return DataLoader(FailsAtTwoWorkers(), batch_size=16, num_workers=2)
