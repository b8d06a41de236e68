"""A dataset whose DataLoader worker starts a helper process of its own (a decoder service, as a
dataset that shells out to a decoder does), for the memory probe's process tree (NOTE [the whole
process tree] in stallscope/runtime/resources.py).

* :func:`growing_helper` — each worker starts one helper (``subprocess.Popen``: a DataLoader
  worker is a daemon process and may not start ``multiprocessing`` children) at its first fetch
  and asks it for every sample; the helper keeps ``KEPT_KB`` of every request for good, so its
  memory grows sample after sample while the worker's own stays flat.
* :func:`steady_helper` — the same helper keeping nothing.

A helper ends when its worker's end of the pipe closes (the worker exited or was killed), so
none outlives the loader.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from torch.utils.data import Dataset

KEPT_KB = 512  # per sample, in the helper: 500 MB per 1,000 samples
ITEMS = 400

_HELPER = """
import sys
keep = int(sys.argv[1])
kept = []
for line in sys.stdin:
    if keep:
        block = bytearray(keep * 1024)
        block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not just reserved
        kept.append(block)
    sys.stdout.write(line)
    sys.stdout.flush()
"""

_HELPERS: dict[int, subprocess.Popen] = {}  # worker pid -> its helper


class HelperDataset(Dataset):
    """Each sample is computed by asking this worker's helper process for it."""

    def __init__(self, kept_kb: int, n: int = ITEMS) -> None:
        self.kept_kb = kept_kb
        self.n = n

    def __len__(self) -> int:
        return self.n

    def _helper(self) -> subprocess.Popen:
        helper = _HELPERS.get(os.getpid())
        if helper is None or helper.poll() is not None:
            helper = subprocess.Popen(
                [sys.executable, "-c", _HELPER, str(self.kept_kb)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            _HELPERS[os.getpid()] = helper
        return helper

    def __getitem__(self, index: int):
        helper = self._helper()
        assert helper.stdin is not None and helper.stdout is not None
        helper.stdin.write(f"{index}\n")
        helper.stdin.flush()
        value = int(helper.stdout.readline())
        return torch.full((8,), float(value)), index % 10


def growing_helper() -> dict:
    return {"dataset": HelperDataset(KEPT_KB), "batch_size": 8}


def steady_helper() -> dict:
    return {"dataset": HelperDataset(0), "batch_size": 8}
