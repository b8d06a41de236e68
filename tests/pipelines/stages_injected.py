"""Pipelines with known per-stage costs (sleep-based, stable on a loaded machine) for the
stage-attribution tests and ``benchmarks/stage_accuracy.py``.

Per sample: read 4 ms and decode 6 ms (marked with ``ss.stage``), two transforms of a
Compose (``RandomShiftA`` 3 ms, random by its name; ``ScaleB`` 2 ms, deterministic),
2 ms of unmarked ``__getitem__`` work, and a collate of 16 ms per batch of 8 (2 ms per sample).

A ``time.sleep(d)`` takes longer than ``d`` (timer slack, wake-up latency: ~0.1 ms on
an idle machine, more when other processes compete for the cores). So every injected
stage also times itself where it runs (``injection(stage)``), and when
``STALLSCOPE_STAGES_TRUTH`` names a folder each worker writes those true durations there,
batch by batch, as it exits: :func:`read_truth` gives the cost really injected per
sample, over the batches stallscope measured, to compare its attribution with.
"""

from __future__ import annotations

import json
import multiprocessing.util
import os
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset
from torch.utils.data.dataloader import default_collate

import stallscope as ss

BATCH_SIZE = 8
READ_S = 0.004
DECODE_S = 0.006
TRANSFORM_A_S = 0.003
TRANSFORM_B_S = 0.002
OTHER_S = 0.002
COLLATE_S = 0.016  # per batch

# stage name -> injected ms per sample
INJECTED_MS = {
    "read": READ_S * 1000,
    "decode": DECODE_S * 1000,
    "RandomShiftA": TRANSFORM_A_S * 1000,
    "ScaleB": TRANSFORM_B_S * 1000,
    "other (__getitem__)": OTHER_S * 1000,
    "collate": COLLATE_S * 1000 / BATCH_SIZE,
}


TRUTH_ENV = "STALLSCOPE_STAGES_TRUTH"
WHOLE_GETITEM = "__getitem__ (whole)"
OTHER = "other (__getitem__)"
_BATCH: dict[str, list[float]] = {}  # stage -> [seconds slept, sleeps] in the batch being made
_BATCHES: list[dict[str, list[float]]] = []  # this worker's finished batches, in order
_DUMP_REGISTERED: set[int] = set()


class injection:  # noqa: N801  (used like a function: ``with injection("read"):``)
    """Times the block as the cost really injected into ``stage`` (sleep and all).

    A plain class, not a generator-based context manager: its clock reads sit right at the
    block's edges, so the truth misses as little as possible of what the block costs (also
    under stallscope's call tracing, which makes every Python call a little dearer)."""

    __slots__ = ("stage", "start")

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self) -> None:
        _register_dump()
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        _add(self.stage, time.perf_counter() - self.start)


def _add(stage: str, seconds: float) -> None:
    entry = _BATCH.setdefault(stage, [0.0, 0])
    entry[0] += seconds
    entry[1] += 1


def _close_batch() -> None:
    _BATCHES.append(dict(_BATCH))
    _BATCH.clear()


def _register_dump() -> None:
    folder = os.environ.get(TRUTH_ENV)
    pid = os.getpid()
    if not folder or pid in _DUMP_REGISTERED or multiprocessing.parent_process() is None:
        return  # only DataLoader workers report; the main process's in-process runs do not count
    _DUMP_REGISTERED.add(pid)
    _BATCH.clear()  # a forked worker starts afresh (its parent's counts came along)
    _BATCHES.clear()
    # Runs when the worker process exits normally (multiprocessing's exit hooks).
    multiprocessing.util.Finalize(None, _dump_truth, args=(folder,), exitpriority=10)


def _dump_truth(folder: str) -> None:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    worker = info.id if info is not None else os.getpid()
    Path(folder, f"{os.getpid()}.json").write_text(
        json.dumps({"worker": worker, "batches": _BATCHES})
    )


def read_truth(
    folder: str | Path, consumed_batches: int | None = None, warmup_per_worker: int = 1
) -> dict[str, float]:
    """Mean really-injected ms per sample for each stage, over the batches stallscope measured.

    A DataLoader hands batch k to worker ``k % workers`` and delivers them in order, so of
    ``consumed_batches`` each worker made the first ``len(range(w, consumed, workers))``;
    the first ``warmup_per_worker`` of those were stallscope's warm-up. Batches a worker
    prefetched but nobody consumed are left out, as stallscope never saw them.
    """
    reports = [json.loads(path.read_text()) for path in Path(folder).glob("*.json")]
    workers = len(reports)
    totals: dict[str, list[float]] = {}
    for report in reports:
        batches = report["batches"]
        if consumed_batches is not None:
            batches = batches[: len(range(report["worker"], consumed_batches, workers))]
        for batch in batches[warmup_per_worker:]:
            for stage, (seconds, count) in batch.items():
                entry = totals.setdefault(stage, [0.0, 0])
                entry[0] += seconds
                entry[1] += count
    per_batch = {"collate": BATCH_SIZE}
    truth = {
        stage: 1000.0 * seconds / count / per_batch.get(stage, 1)
        for stage, (seconds, count) in totals.items()
        if count
    }
    whole = truth.pop(WHOLE_GETITEM, None)
    if whole is not None:
        inner = sum(truth.get(name, 0.0) for name in ("read", "decode", "RandomShiftA", "ScaleB"))
        truth[OTHER] = whole - inner
    return truth


def transform_name(transform) -> str:
    return type(getattr(transform, "inner", transform)).__name__


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, value):
        # Each transform's true cost is its call as made here (stallscope's proxy included).
        for transform in self.transforms:
            with injection(transform_name(transform)):
                value = transform(value)
        return value


class RandomShiftA:
    def __init__(self, seconds: float = TRANSFORM_A_S) -> None:
        self.seconds = seconds

    def __call__(self, x):
        time.sleep(self.seconds)
        return x + 1


class ScaleB:
    def __init__(self, seconds: float = TRANSFORM_B_S) -> None:
        self.seconds = seconds

    def __call__(self, x):
        time.sleep(self.seconds)
        return x * 2


class InjectedDataset(Dataset):
    def __init__(self, length: int = 64, transform=None) -> None:
        self.length = length
        self.transform = transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        # "other" is everything here outside the marked stages and the transforms' own
        # bodies (the 2 ms sleep, the Compose loop, the proxies' calls): the whole body
        # is timed, and read_truth subtracts the inner stages.
        with injection(WHOLE_GETITEM):
            with injection("read"), ss.stage("read"):
                time.sleep(READ_S)
            with injection("decode"), ss.stage("decode"):
                time.sleep(DECODE_S)
                x = torch.full((16,), float(index))
            time.sleep(OTHER_S)
            if self.transform is not None:
                x = self.transform(x)
            return x, index


def slow_collate(batch):
    with injection("collate"):
        time.sleep(COLLATE_S)
        out = default_collate(batch)
    _close_batch()
    return out


def injected():
    dataset = InjectedDataset(transform=Compose([RandomShiftA(), ScaleB()]))
    return {"dataset": dataset, "batch_size": BATCH_SIZE, "collate_fn": slow_collate}
