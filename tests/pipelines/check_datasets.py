"""Small real pipelines for `check`: one per finding code, plus a clean one.

Classes live at module level so spawned workers can import them; each factory
takes no arguments (usable as a CLI TARGET: tests/pipelines/check_datasets.py:hanging).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class CleanDataset(Dataset):
    """In-memory arrays with a random augmentation drawn from the global RNGs.

    torch seeds ``random``, torch and NumPy's legacy global RNG differently in each
    worker, so this must not be reported as duplicate-rng.
    """

    def __init__(self, n: int = 96) -> None:
        self.x = np.arange(n * 16, dtype=np.float32).reshape(n, 16)
        self.y = np.arange(n) % 10

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        noise = torch.rand(16) + float(np.random.rand()) + random.random()
        return torch.from_numpy(self.x[i]) + noise, int(self.y[i])


def clean():
    return {"dataset": CleanDataset(), "batch_size": 8}


class Scale:
    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)


class LambdaTransformDataset(CleanDataset):
    """The classic spawn crash: a lambda inside the transform."""

    def __init__(self) -> None:
        super().__init__(32)
        self.transform = Scale(lambda x: x * 2)

    def __getitem__(self, i: int):
        x, y = super().__getitem__(i)
        return self.transform(x), y


def lambda_transform():
    return {"dataset": LambdaTransformDataset(), "batch_size": 8}


class SharedGeneratorDataset(CleanDataset):
    """A NumPy Generator created in __init__: every worker inherits the same state."""

    def __init__(self) -> None:
        super().__init__(32)
        self.rng = np.random.default_rng()

    def __getitem__(self, i: int):
        jitter = self.rng.normal(size=16).astype(np.float32)
        return torch.from_numpy(self.x[i] + jitter), int(self.y[i])


def shared_generator():
    return {"dataset": SharedGeneratorDataset(), "batch_size": 8}


_MODULE_RNG = np.random.default_rng()  # created at import: copied into every fork worker


class ModuleGeneratorDataset(CleanDataset):
    """Draws from a module-level Generator: no attribute to find, the samples tell."""

    def __init__(self) -> None:
        super().__init__(32)

    def __getitem__(self, i: int):
        return torch.from_numpy(self.x[i] + _MODULE_RNG.normal(size=16).astype(np.float32)), int(
            self.y[i]
        )


def module_generator():
    return {"dataset": ModuleGeneratorDataset(), "batch_size": 8}


class GrowingCacheDataset(CleanDataset):
    """Keeps 64 KB from every fetch in a list on self: grows without bound."""

    def __init__(self) -> None:
        super().__init__(256)
        self.seen: list[bytearray] = []

    def __getitem__(self, i: int):
        self.seen.append(bytearray(64 * 1024))
        return super().__getitem__(i)


def growing_cache():
    return {"dataset": GrowingCacheDataset(), "batch_size": 16}


class AnnotationsDataset(Dataset):
    """COCO-style metadata as a list of dicts of lists: reading it writes refcounts on
    shared pages."""

    def __init__(self, n: int = 30_000) -> None:
        self.records = [
            {
                "file": f"images/{i:07d}.jpg",
                "label": i % 91,
                "boxes": [[i % 640, i % 480, 32, 32], [1, 2, 3, 4], [5, 6, 7, 8]],
            }
            for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        record = self.records[i]
        return torch.tensor(record["boxes"], dtype=torch.float32), record["label"]


def annotations():
    return {"dataset": AnnotationsDataset(), "batch_size": 32}


class SlowSampleDataset(CleanDataset):
    """Two samples that always take 0.25 s (a huge file, a remote read)."""

    SLOW = (5, 17)

    def __init__(self) -> None:
        super().__init__(64)

    def __getitem__(self, i: int):
        if i in self.SLOW:
            time.sleep(0.25)
        return super().__getitem__(i)


def slow_samples():
    return {"dataset": SlowSampleDataset(), "batch_size": 8}


class HangingDataset(CleanDataset):
    """Index 3 waits forever (a dead network mount, a lock never released)."""

    def __init__(self) -> None:
        super().__init__(16)

    def __getitem__(self, i: int):
        if i == 3:
            threading.Event().wait()  # HANG-LINE
        return super().__getitem__(i)


def hanging():
    return {"dataset": HangingDataset(), "batch_size": 4}


class RaisingDataset(CleanDataset):
    """Index 6 has no label."""

    def __init__(self) -> None:
        super().__init__(32)
        self.labels = {i: i % 10 for i in range(32) if i != 6}

    def __getitem__(self, i: int):
        x, _ = super().__getitem__(i)
        return x, self.labels[i]


def raising():
    return {"dataset": RaisingDataset(), "batch_size": 8}


class CrashingDataset(CleanDataset):
    """Index 4 kills its worker the way a decoder segfault on a corrupt file does."""

    def __init__(self) -> None:
        super().__init__(16)

    def __getitem__(self, i: int):
        if i == 4:
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().__getitem__(i)


def crashing():
    return {"dataset": CrashingDataset(), "batch_size": 4}


class RaggedDataset(CleanDataset):
    """Variable-length sequences that the default collate cannot stack."""

    def __init__(self) -> None:
        super().__init__(24)

    def __getitem__(self, i: int):
        return torch.ones(3 + i % 3), int(self.y[i])


def ragged():
    return {"dataset": RaggedDataset(), "batch_size": 6}


class BigItemDataset(Dataset):
    """256 KB float32 items: a batch of 16 is 4 MB."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int):
        return torch.full((64 * 1024,), float(i))


def big_batches():
    return {"dataset": BigItemDataset(), "batch_size": 16}


def four_threads(worker_id: int) -> None:
    """A worker_init_fn that undoes DataLoader's one-thread-per-worker setting."""
    torch.set_num_threads(4)


def thread_hungry():
    return DataLoader(CleanDataset(64), batch_size=8, num_workers=2, worker_init_fn=four_threads)


class SleepyDataset(CleanDataset):
    """20 ms per sample, 2,000 samples: more than a short budget can cover."""

    def __init__(self) -> None:
        super().__init__(2000)

    def __getitem__(self, i: int):
        time.sleep(0.02)
        return super().__getitem__(i)


def sleepy():
    return {"dataset": SleepyDataset(), "batch_size": 8}


def many_bugs():
    """Several problems at once, for the end-to-end CLI test."""
    return {"dataset": BuggyDataset(), "batch_size": 4}


class BuggyDataset(SharedGeneratorDataset):
    def __init__(self) -> None:
        super().__init__()
        self.transform = Scale(lambda x: x + 1)

    def __getitem__(self, i: int):
        if i == 9:
            raise ValueError("corrupt record 9")
        x, y = super().__getitem__(i)
        return self.transform(x), y


# -- memory growth, by cause (Python heap vs native) -----------------------------------------------


class LeakyCacheDataset(Dataset):
    """Appends every sample (a 128 KiB NumPy array, which tracemalloc sees) to ``self.cache``."""

    def __init__(self, n: int = 256) -> None:
        self.n = n
        self.cache: list[np.ndarray] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        sample = np.full(16 * 1024, float(i))  # LEAK-LINE
        self.cache.append(sample)
        return torch.from_numpy(sample[:16].astype(np.float32)), i % 10


def leaky_cache():
    return {"dataset": LeakyCacheDataset(), "batch_size": 16}


# A library's per-shape workspace (FFT plans, cuDNN-style algorithm caches): module level, so
# the dataset holds nothing, and torch's allocator, which tracemalloc does not see.
_SHAPE_WORKSPACES: dict[int, torch.Tensor] = {}


class ShapeCacheDataset(Dataset):
    """Native memory grows while new input shapes appear (the first pass), then stays flat."""

    SHAPES = 48

    def __init__(self, n: int = 384) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        shape = i % self.SHAPES
        if shape not in _SHAPE_WORKSPACES:
            _SHAPE_WORKSPACES[shape] = torch.ones(
                256 * 1024 + shape
            )  # about 1 MiB, written so it is resident
        return torch.full((16,), float(shape)), i % 10


def shape_cache():
    return {"dataset": ShapeCacheDataset(), "batch_size": 16}


_LEAKED: list[torch.Tensor] = []


class NativeLeakDataset(Dataset):
    """Keeps a 256 KiB tensor per fetch in a module-level list: native memory that never
    stops growing."""

    def __init__(self, n: int = 256) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        _LEAKED.append(torch.ones(64 * 1024))
        return torch.zeros(16), i % 10


def native_leak():
    return {"dataset": NativeLeakDataset(), "batch_size": 16}


class ScatteredSlowDataset(Dataset):
    """2,000 items of about 1 ms, three of which take 400 ms, far apart in the index range."""

    SLOW = (137, 1021, 1874)

    def __init__(self, n: int = 2000) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(0.4 if i in self.SLOW else 0.001)
        return torch.zeros(8), i % 10


def scattered_slow():
    return {"dataset": ScatteredSlowDataset(), "batch_size": 16}


class LazyHandle(Dataset):
    """Opens its file on first use, the usual way to keep an HDF5 or LMDB handle out of the
    pickle spawn workers get: as built, it pickles."""

    def __init__(self) -> None:
        self.handle = None

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.handle is None:
            self.handle = open(__file__, "rb")  # noqa: SIM115 - held, as a reader's file is
        return torch.tensor(index)


def lazy_handle() -> dict:
    return {"dataset": LazyHandle(), "batch_size": 4}


class OwnLoader(torch.utils.data.DataLoader):
    """A DataLoader subclass of the user's, given as it is (its trials are copies of it)."""


def lazy_handle_own_loader() -> OwnLoader:
    return OwnLoader(LazyHandle(), batch_size=4)
