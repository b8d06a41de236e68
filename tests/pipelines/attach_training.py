"""A training job to attach to: a DataLoader with 2 workers over a dataset of known per-item
cost, a train step of known cost, and the job's own per-step data wait in a log.

Run on its own: ``python attach_training.py --setting input --steps 600 --step-log s.jsonl``; each
line of the log is one step: ``{"t": wall-clock start, "wait_s": time in next(), "step_s": next()
and the step}``; the last line is ``{"done": true, "checksum": ...}``, a digest of every batch
the loop consumed, so a run with and without ``stallscope attach`` can be shown to compute the same
thing.

Costs are sleeps, so they hold under any CPU load: an item costs ``read_ms`` in
:func:`slow_read` and ``augment_ms`` in :func:`augment` (so ``slow_read`` holds
``read_ms / (read_ms + augment_ms)`` of a worker's busy time); the step costs ``step_ms`` in
:func:`train_step` (``--setting cpu``: ``step_ms`` of CPU time spun instead). ``--setting stuck``
makes worker item 7 block in :func:`wait_forever`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

SETTINGS = {
    # name: (read_ms, augment_ms, batch_size, step_ms)
    "input": (12.0, 4.0, 4, 8.0),  # a batch every ~32 ms from 2 workers, a step of 8 ms
    "compute": (6.0, 2.0, 4, 45.0),  # a batch every ~16 ms, a step of 45 ms
    "stuck": (2.0, 1.0, 4, 5.0),
    # as "compute", with a step that burns CPU instead of sleeping: what sampling costs a job
    # whose step needs the cores
    "cpu": (6.0, 2.0, 4, 30.0),
}
STUCK_ITEM = 7


def slow_read(index: int, seconds: float) -> torch.Tensor:
    time.sleep(seconds)
    return torch.full((16,), float(index))


def augment(x: torch.Tensor, seconds: float) -> torch.Tensor:
    time.sleep(seconds)
    return x * 2.0 + 1.0


def wait_forever() -> None:
    while True:
        time.sleep(0.05)


class KnownCost(Dataset):
    def __init__(self, read_ms: float, augment_ms: float, stuck: bool, length: int = 100_000):
        self.read_s = read_ms / 1000.0
        self.augment_s = augment_ms / 1000.0
        self.stuck = stuck
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.stuck and index == STUCK_ITEM:
            wait_forever()
        return augment(slow_read(index, self.read_s), self.augment_s)


def train_step(batch: torch.Tensor, seconds: float, spin: bool = False) -> float:
    if spin:
        until = time.thread_time() + seconds  # this thread's CPU time, whatever else runs
        while time.thread_time() < until:
            pass
    else:
        time.sleep(seconds)
    return float(batch.sum())


def expected_checksum(setting: str, steps: int) -> str:
    """The checksum a run of ``steps`` steps must log: item i is 16 values of 2i + 1, so a
    batch's sum is exact in float32, whatever measured it."""
    batch_size = SETTINGS[setting][2]
    digest = hashlib.sha256()
    for step in range(steps):
        items = range(step * batch_size, (step + 1) * batch_size)
        digest.update(repr(float(sum(16 * (2 * i + 1) for i in items))).encode())
    return digest.hexdigest()


def read_log(path: str) -> tuple[list[dict[str, float]], dict[str, object] | None]:
    """(steps, the final line or None while the job runs)."""
    steps, done = [], None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            if entry.get("done"):
                done = entry
            else:
                steps.append(entry)
    return steps, done


def logged_wait_fraction(steps: list[dict[str, float]], start: float, end: float) -> float:
    """The job's own data-wait share of its loop's wall time, over the steps that started within
    [start, end): from the first one's start to the start of the step after the last (the loop's
    logging counts as loop time, as it does for a sampler)."""
    inside = [i for i, s in enumerate(steps) if start <= s["t"] < end]
    if not inside:
        return float("nan")
    first, last = inside[0], inside[-1]
    if last + 1 < len(steps):
        wall = steps[last + 1]["t"] - steps[first]["t"]
    else:
        wall = steps[last]["t"] + steps[last]["step_s"] - steps[first]["t"]
    waited = sum(steps[i]["wait_s"] for i in inside)
    return waited / wall if wall > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="input")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument(
        "--slow-rank", type=int, default=None, help="under torchrun: this rank reads 3x slower"
    )
    parser.add_argument("--step-log", required=True)
    parser.add_argument("--ready", default=None, help="file written once the loop runs")
    parser.add_argument(
        "--stop-file", default=None, help="end the loop (normally) once this file exists"
    )
    args = parser.parse_args()
    rank = os.environ.get("RANK")
    if rank is not None:  # under torchrun every rank logs on its own
        args.step_log = f"{args.step_log}.rank{rank}"
        args.ready = f"{args.ready}.rank{rank}" if args.ready else None
    read_ms, augment_ms, batch_size, step_ms = SETTINGS[args.setting]
    if rank is not None and args.slow_rank == int(rank):
        read_ms *= 3
    dataset = KnownCost(read_ms, augment_ms, stuck=args.setting == "stuck")
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=2, shuffle=False)
    digest = hashlib.sha256()
    with open(args.step_log, "w", encoding="utf-8") as log:
        iterator = iter(loader)
        for step in range(args.steps):
            started = time.time()
            t0 = time.perf_counter()
            batch = next(iterator)
            t1 = time.perf_counter()
            loss = train_step(batch, step_ms / 1000.0, spin=args.setting == "cpu")
            t2 = time.perf_counter()
            digest.update(repr(loss).encode())
            log.write(json.dumps({"t": started, "wait_s": t1 - t0, "step_s": t2 - t0}) + "\n")
            log.flush()
            if step == 0 and args.ready:
                with open(args.ready, "w", encoding="utf-8") as ready:
                    ready.write(str(os.getpid()))
            if args.stop_file and os.path.exists(args.stop_file):
                break
        log.write(json.dumps({"done": True, "checksum": digest.hexdigest()}) + "\n")


if __name__ == "__main__":
    main()
