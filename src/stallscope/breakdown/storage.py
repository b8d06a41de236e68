"""Cold vs warm page cache (as DS-Analyzer does): fetching from storage vs preparing on the CPU."""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import UsageError
from .inprocess import _fetcher, _single_torch_thread, _spread_indices
from .results import ProgressFn, StorageSplit


@contextlib.contextmanager
def _files_opened() -> Iterator[set[str]]:
    """Paths of the files Python's ``open()`` reads while the block runs."""
    seen: set[str] = set()
    original = builtins.open

    def tracking_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)) and not any(c in mode for c in "wax+"):
            seen.add(os.path.abspath(os.fsdecode(file)))
        return original(file, mode, *args, **kwargs)

    builtins.open = tracking_open
    io_open = io.open
    io.open = tracking_open
    try:
        yield seen
    finally:
        builtins.open = original
        io.open = io_open


def drop_from_page_cache(paths: Sequence[str]) -> int:
    """Ask the kernel to forget the cached pages of ``paths``; returns how many it was asked for."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        raise UsageError(
            "--drop-cache needs os.posix_fadvise, which this platform lacks (it is Linux-only)."
        )
    dropped = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            dropped += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return dropped


def measure_storage_split(
    pipeline: Any,
    *,
    samples: int = 128,
    progress: ProgressFn | None = None,
) -> StorageSplit | None:
    """Differential run (as DS-Analyzer does): the same samples with the files in the page
    cache (warm: CPU preparation only) and after dropping them (cold: + fetch from storage)."""
    if pipeline.is_iterable:
        return None
    length = pipeline.length() or samples
    indices = _spread_indices(
        length, min(samples, length)
    )  # each file once per pass: no re-warming
    fetch = _fetcher(pipeline.dataset, False)
    with _single_torch_thread():
        with _files_opened() as files:
            fetch(indices)  # discovers the files and warms the cache
        if progress is not None:
            progress("cold vs warm page cache", 0.3)
        paths = sorted(p for p in files if os.path.isfile(p))
        if not paths:
            return None
        start = time.perf_counter()
        fetch(indices)
        warm = time.perf_counter() - start
        drop_from_page_cache(paths)
        if progress is not None:
            progress("cold vs warm page cache", 0.6)
        start = time.perf_counter()
        fetch(indices)
        cold = time.perf_counter() - start
    if progress is not None:
        progress("cold vs warm page cache", 1.0)
    count = len(indices)
    warm_ms, cold_ms = 1000.0 * warm / count, 1000.0 * cold / count
    fetch_ms = max(0.0, cold_ms - warm_ms)
    return StorageSplit(
        files=len(paths),
        bytes=sum(os.path.getsize(p) for p in paths),
        samples=count,
        warm_ms_per_sample=warm_ms,
        cold_ms_per_sample=cold_ms,
        fetch_ms_per_sample=fetch_ms,
        prepare_ms_per_sample=warm_ms,
        fetch_share=fetch_ms / cold_ms if cold_ms > 0 else 0.0,
    )
