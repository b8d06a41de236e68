"""What a sampler thread's wake-up costs a busy training loop (NOTE [sampler and the GIL]).

A loop over an in-memory DataLoader (batch 64, num_workers=0: it runs Python
code all the time and never lets go of the GIL on its own) runs bare (A) and
with a thread that wakes every ``--period`` seconds and does one thing (B),
interleaved A B B A per block of two 250-step epochs. Per kind of work the
figure is the median over blocks of B ÷ A, and the cost per wake-up implied
by it (the extra time divided by the wake-ups in it):

- ``nothing``: the wake-up alone (the thread takes the GIL and lets it go);
- ``process_time``: ``time.process_time()`` (no file, no blocking call);
- ``pread``: one ``os.pread`` of an open /proc/PID/statm (one blocking call);
- ``psutil``: ``Process.cpu_times()`` and ``memory_info()`` (a file opened,
  read and closed per figure, several blocking calls).

Waking every 10 ms magnifies the cost 50× over a sampler's default half
second, so that it stands above this machine's noise.

    python benchmarks/gil_handover.py [--blocks 60] [--period 0.01]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

import psutil
import torch
from torch.utils.data import DataLoader, TensorDataset


def epoch_seconds(loader: DataLoader) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def works() -> dict[str, Callable[[], object]]:
    fd = os.open(f"/proc/{os.getpid()}/statm", os.O_RDONLY)
    proc = psutil.Process()
    return {
        "nothing": lambda: None,
        "process_time": time.process_time,
        "pread": lambda: os.pread(fd, 128, 0),
        "psutil": lambda: (proc.cpu_times(), proc.memory_info()),
    }


def with_waker(loader: DataLoader, work: Callable[[], object], period: float) -> tuple[float, int]:
    """Two epochs with a thread waking every ``period`` s to do ``work``: (seconds, wake-ups)."""
    stop = threading.Event()
    wakes = [0]

    def run() -> None:
        while not stop.wait(period):
            work()
            wakes[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    seconds = epoch_seconds(loader) + epoch_seconds(loader)
    stop.set()
    thread.join()
    return seconds, wakes[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--period", type=float, default=0.01)
    args = parser.parse_args()
    n = 250 * 64
    loader = DataLoader(
        TensorDataset(torch.randn(n, 32), torch.randint(0, 10, (n,))), batch_size=64
    )
    epoch_seconds(loader)
    print(
        "loop: 250-step epochs over an in-memory DataLoader; a thread wakes every "
        f"{args.period * 1e3:.0f} ms"
    )
    for name, work in works().items():
        ratios, per_wake = [], []
        for _ in range(args.blocks):
            a = epoch_seconds(loader)
            b, wakes = with_waker(loader, work, args.period)
            a += epoch_seconds(loader)
            ratios.append(b / a - 1)
            per_wake.append((b - a) / max(1, wakes))
        print(
            f"  {name:<13} {statistics.median(ratios) * 100:+.2f}% "
            f"(median of {args.blocks} blocks) → {statistics.median(per_wake) * 1e6:.0f} µs "
            "per wake-up"
        )


if __name__ == "__main__":
    main()
