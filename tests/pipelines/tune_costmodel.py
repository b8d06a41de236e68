"""A deterministic cost model of a DataLoader, for testing the search strategy without workers.

The rate of a config follows the mechanics that shape real curves:

* a worker spends ``batch_size × (cpu + wait + per-item overhead) + collate`` of
  wall time per batch, of which ``wait`` releases the CPU (I/O, sleep);
* all workers share ``cores`` of CPU, and the main process spends ``ipc_ms`` of
  CPU receiving each batch (a serial limit of its own);
* processes beyond the cores cost a little scheduling overhead (``contention``);
* batched fetching removes per-item overhead and most of the collate;
* ``worker_threads`` K: a worker fetches its batch's items K at a time, but the
  CPU part of every item holds the process's GIL (plus ``thread_item_ms`` to
  hand an item to a thread), so one process never runs more Python than one core;
* latency spikes (``spike_ms`` with probability ``spike_p`` per batch) stall an
  in-order loader once the prefetch buffer behind the slow batch runs dry;
  ``in_order=False`` lets the other workers carry on.

The limits are combined with a smooth minimum, so curves bend like measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stallscope.config import LoaderConfig
from stallscope.tuning.space import MB, Profile


@dataclass(frozen=True)
class CostModel:
    cores: int = 2
    batch_size: int = 32
    cpu_ms: float = 0.0  # CPU per sample
    wait_ms: float = 0.0  # GIL-free waiting per sample
    item_overhead_ms: float = 0.0  # per-item Python overhead (gone with batched fetching)
    collate_ms: float = 0.1  # per batch, in the worker
    ipc_ms: float = 0.3  # per batch, main-process CPU to receive from a worker
    contention: float = 0.002  # fraction of throughput lost per process beyond the cores
    spike_ms: float = 0.0
    spike_p: float = 0.0
    batched: bool = False  # a vectorised fetch exists
    threads_gain: float = 1.0  # speed factor of torch_threads=1 at 0 workers
    thread_item_ms: float = 0.02  # CPU per item to run it on a fetch thread (worker_threads)
    worker_mb: float = 60.0
    batch_mb: float = 1.0

    # -- truth -------------------------------------------------------------------
    def rate(self, config: LoaderConfig) -> float:
        bs = config.batch_size
        overhead = 0.0 if config.batched_fetch and self.batched else self.item_overhead_ms
        collate = self.collate_ms * (0.1 if config.batched_fetch and self.batched else 1.0)
        cpu_batch = (bs * (self.cpu_ms + overhead) + collate) / 1000
        wall_batch = cpu_batch + bs * self.wait_ms / 1000
        k = config.worker_threads
        if k:
            item_cpu = self.cpu_ms + overhead + self.thread_item_ms
            waves = math.ceil(bs / k)
            cpu_batch = (bs * item_cpu + collate) / 1000
            wall_batch = (max(waves * (item_cpu + self.wait_ms), bs * item_cpu) + collate) / 1000
        spikes = self.spike_p * self.spike_ms / 1000
        w = config.num_workers
        if w == 0:
            rate = bs / (wall_batch + spikes)
            return rate * (self.threads_gain if config.torch_threads == 1 else 1.0)
        ipc = self.ipc_ms / 1000
        limits = [
            w / wall_batch,  # latency: each worker makes one batch per wall_batch
            self.cores / (cpu_batch + ipc),  # CPU shared by workers and the receiving main process
            1 / ipc,  # the main process receives one batch at a time
        ]
        batches = _smooth_min(limits)
        batches /= 1 + self.contention * max(0, w + 1 - self.cores)
        if spikes:
            pf = config.prefetch_factor or 2
            buffered = pf * w / batches  # seconds of work queued behind a slow batch
            stall = max(0.0, self.spike_ms / 1000 - buffered)
            if not config.in_order:
                stall *= 1.0 / w  # only the slow worker's slots wait
            batches = 1 / (1 / batches + self.spike_p * stall + spikes / w)
        return batches * bs

    def startup(self, config: LoaderConfig) -> float:
        return 0.05 + 0.03 * config.num_workers

    def worker_bytes(self, config: LoaderConfig) -> int:
        return int(self.worker_mb * MB)

    # -- what the cheap in-process probe would see -------------------------------
    def profile(self) -> Profile:
        per_item = (self.cpu_ms + self.wait_ms + self.item_overhead_ms) / 1000
        cpu_share = (self.cpu_ms + self.item_overhead_ms) / max(
            1e-9, self.cpu_ms + self.wait_ms + self.item_overhead_ms
        )
        jitter = 1.0 + (self.spike_ms / max(1e-9, per_item * 1000) if self.spike_p >= 0.05 else 0.0)
        spike = 1.0 + (self.spike_ms / max(1e-9, per_item * 1000) if self.spike_p > 0 else 0.0)
        return Profile(
            seconds_per_sample=per_item,
            cpu_per_wall=cpu_share,
            collate_s=self.collate_ms / 1000,
            batch_bytes=int(self.batch_mb * MB),
            jitter=jitter,
            spike=spike,
            batched_fetch="tensor-index" if self.batched else None,
            batched_speedup=(
                self.rate(LoaderConfig(batch_size=self.batch_size, batched_fetch=True))
                / self.rate(LoaderConfig(batch_size=self.batch_size))
            )
            if self.batched
            else None,
            items=64,
        )

    def best_over(self, configs: list[LoaderConfig]) -> tuple[LoaderConfig, float]:
        best = max(configs, key=self.rate)
        return best, self.rate(best)


def _smooth_min(values: list[float], p: float = 6.0) -> float:
    return sum(v**-p for v in values) ** (-1 / p)


def dense_space(
    model: CostModel,
    *,
    max_workers: int = 128,
    batched: bool = False,
    threads: bool = False,
    worker_threads: tuple[int, ...] = (),
) -> list[LoaderConfig]:
    """Every config the search could reach, for the true optimum."""
    configs = [LoaderConfig(num_workers=0, batch_size=model.batch_size)]
    for k in worker_threads:
        configs += [
            LoaderConfig(num_workers=w, batch_size=model.batch_size, worker_threads=k)
            for w in range(max_workers + 1)
        ]
    if batched:
        configs.append(LoaderConfig(num_workers=0, batch_size=model.batch_size, batched_fetch=True))
    if threads:
        configs.append(LoaderConfig(num_workers=0, batch_size=model.batch_size, torch_threads=1))
    for w in range(1, max_workers + 1):
        for pf in (2, 4, 8):
            for ordered in (True, False):
                for b in (False, True) if batched else (False,):
                    configs.append(
                        LoaderConfig(
                            num_workers=w,
                            batch_size=model.batch_size,
                            prefetch_factor=pf,
                            in_order=ordered,
                            batched_fetch=b,
                        )
                    )
    return configs


# Pipelines the tests and docs refer to.
CPU_BOUND = CostModel(cpu_ms=2.0, collate_ms=1.0, batch_size=32)
LATENCY_BOUND = CostModel(cpu_ms=0.5, wait_ms=10.0, batch_size=16, ipc_ms=0.4)
TINY_IN_MEMORY = CostModel(
    cpu_ms=0.002, item_overhead_ms=0.01, collate_ms=0.4, ipc_ms=0.8, batch_size=64, batched=True
)
JITTERY = CostModel(cpu_ms=1.0, spike_ms=100.0, spike_p=0.05, batch_size=16)
