"""Datasets for worker threads (``ss.threaded_dataset``, ``worker_threads``) and their
thread-safety check.

Module-level classes and factories: spawned workers import them, and the CLI takes
``tests/pipelines/threads_datasets.py:<fn>`` as a target.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import torch
from torch.utils.data import Dataset

RECORD = 64  # bytes per record in the file-backed datasets


class LatencyItems(Dataset):
    """Each item waits ``wait_s`` with the GIL released (a remote read), then returns its index.

    The dataset counts the most fetches seen in flight at once; with ``report_thread`` items
    also name the thread that fetched them (which makes them differ between threads).
    """

    def __init__(
        self,
        n: int = 256,
        wait_s: float = 0.006,
        fail_at: int | None = None,
        report_thread: bool = False,
    ) -> None:
        self.n = n
        self.report_thread = report_thread
        self.wait_s = wait_s
        self.fail_at = fail_at
        self.label = "latency"  # an attribute the wrapper must pass through
        self._lock = threading.Lock()
        self._in_flight = 0
        self.max_in_flight = 0

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            time.sleep(self.wait_s)
            if index == self.fail_at:
                raise KeyError(index)
            item = {"x": torch.full((4,), float(index)), "index": index}
            if self.report_thread:
                item["thread"] = threading.current_thread().name
            return item
        finally:
            with self._lock:
                self._in_flight -= 1


class BatchedQuery(LatencyItems):
    """A dataset with its own batched fetch: one query per batch (the wrapper must keep it)."""

    def __getitems__(self, indices: list[int]) -> list[dict]:
        time.sleep(self.wait_s)
        return [
            {"x": torch.full((4,), float(i)), "index": i, "thread": threading.current_thread().name}
            for i in indices
        ]


def write_records(n: int = 256, path: str | None = None) -> str:
    """A file of ``n`` fixed-size records; record ``i`` is the byte ``i % 256`` repeated."""
    if path is None:
        fd, path = tempfile.mkstemp(prefix="stallscope-records-", suffix=".bin")
        os.close(fd)
    with open(path, "wb") as f:
        for i in range(n):
            f.write(bytes([i % 256]) * RECORD)
    return path


class SharedHandleRecords(Dataset):
    """NOT thread-safe: one file handle for every fetch, read with seek() then read().

    Two threads can interleave between one's seek and its read, so a thread
    reads another index's record: the classic shared-handle race. Half the latency falls between
    the seek and the read (a remote file's read waits too), so threads that overlap race every
    time rather than by the scheduler's chance.
    """

    def __init__(self, path: str, n: int = 256, wait_s: float = 0.001) -> None:
        self.path = path
        self.n = n
        self.wait_s = wait_s
        self._handle = None
        self._pid = 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_handle": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        # One handle per process: a handle opened before a fork would share its file offset with
        # the forked workers, and their seeks would race across processes (reads past the end
        # of the file, not only wrong records). The race under test is between threads.
        if self._handle is None or self._pid != os.getpid():
            self._handle, self._pid = open(self.path, "rb", buffering=0), os.getpid()
        time.sleep(self.wait_s / 2)  # the request's latency, half before the seek...
        self._handle.seek(index * RECORD)
        time.sleep(self.wait_s / 2)  # ...and half in the read, where other threads seek meanwhile
        raw = self._handle.read(RECORD)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


class PerThreadRecords(SharedHandleRecords):
    """Thread-safe: each thread opens its own handle (threading.local)."""

    def __init__(self, path: str, n: int = 256, wait_s: float = 0.001) -> None:
        super().__init__(path, n, wait_s)
        self._local = threading.local()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_local", "_handle")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._handle = None
        self._local = threading.local()

    def __getitem__(self, index: int) -> torch.Tensor:
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = open(self.path, "rb", buffering=0)
        time.sleep(self.wait_s)
        handle.seek(index * RECORD)
        return torch.frombuffer(bytearray(handle.read(RECORD)), dtype=torch.uint8)


class NoisyRecords(PerThreadRecords):
    """Thread-safe with random augmentation: the record plus noise from torch's global RNG."""

    def __getitem__(self, index: int) -> dict:
        record = super().__getitem__(index)
        return {"record": record, "noise": torch.rand(3), "index": index}


class CpuItems(Dataset):
    """CPU-bound pure Python (holds the GIL): threads cannot help."""

    def __init__(self, n: int = 512, loops: int = 20000) -> None:
        self.n = n
        self.loops = loops

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        acc = 0
        for k in range(self.loops):
            acc = (acc * 31 + k + index) % 1000003
        return torch.tensor([float(acc)])


def latency_source() -> LatencyItems:
    """Target: a latency-bound source, 6 ms GIL-free wait per item."""
    return LatencyItems(n=2048, wait_s=float(os.environ.get("THREADS_WAIT_S", "0.006")))


def latency_loader() -> torch.utils.data.DataLoader:
    """Target: the latency-bound source in the user's DataLoader (batch 16, 2 workers)."""
    return torch.utils.data.DataLoader(latency_source(), batch_size=16, num_workers=2)


def _records_file(n: int) -> str:
    """A records file shared by the CLI targets (written once, atomically)."""
    path = os.path.join(tempfile.gettempdir(), f"stallscope-records-{n}.bin")
    if not os.path.exists(path):
        tmp = write_records(n)
        os.replace(tmp, path)
    return path


def shared_handle_loader() -> torch.utils.data.DataLoader:
    """Target: a latency-bound source that is not thread-safe (one shared file handle)."""
    dataset = SharedHandleRecords(_records_file(2048), n=2048, wait_s=0.006)
    return torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=2)
