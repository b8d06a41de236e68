"""Streaming loaders shaped like a text corpus read from JSONL shards (an ``IterableDataset``).

Four shard files of JSON lines (``{"id": ..., "text": ...}``) are read line by line;
each record becomes a fixed-length tensor of character ids plus its id. The same
reader comes in the shapes users write:

- ``unsharded``: ignores ``get_worker_info()``, so every worker replays every shard
  (the bug ``check`` reports as ``iterable-duplicates``);
- ``sharded``: splits the shard files between workers (``files[id::num_workers]``);
- ``strided``: reads every file but keeps every ``num_workers``-th record from its ``id``;
- ``init_sharded``: the sharding is set up in ``worker_init_fn`` (as in PyTorch's own
  docs), ``__iter__`` never calls ``get_worker_info()`` itself;
- ``random_stream``: endless random samples from each worker's own (DataLoader-seeded)
  generator: random, never duplicated.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import torch
from torch.utils.data import IterableDataset, get_worker_info

SHARDS = 4
LINES_PER_SHARD = 160
LENGTH = 48
WORDS = ("stream", "shard", "token", "worker", "epoch", "batch", "corpus", "line", "json", "text")


def _data_dir() -> Path:
    """The shards, written once (seeded) under a temporary name and renamed into place."""
    root = Path(
        os.environ.get("STALLSCOPE_TEST_DATA")
        or Path(tempfile.gettempdir()) / "stallscope-test-data"
    )
    final = root / "streams-v1"
    if (final / "DONE").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".streams-", dir=root))
    try:
        rng = random.Random(5)
        for shard in range(SHARDS):
            with open(scratch / f"part-{shard:02d}.jsonl", "w") as out:
                for line in range(LINES_PER_SHARD):
                    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
                    out.write(
                        json.dumps({"id": shard * LINES_PER_SHARD + line, "text": words}) + "\n"
                    )
        (scratch / "DONE").write_text("ok\n")
        try:
            os.rename(scratch, final)
        except OSError:
            if not (final / "DONE").exists():
                shutil.rmtree(final, ignore_errors=True)
                os.rename(scratch, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def encode(text: str) -> torch.Tensor:
    ids = [ord(c) % 128 for c in text[:LENGTH]]
    return torch.tensor(ids + [0] * (LENGTH - len(ids)), dtype=torch.int64)


class JsonlStream(IterableDataset):
    """Reads the shard files line by line; ``shard_by`` says how workers split them."""

    def __init__(self, folder: Path, shard_by: str = "none") -> None:
        self.files = sorted(str(p) for p in Path(folder).glob("part-*.jsonl"))
        self.shard_by = shard_by
        self.worker, self.workers = 0, 1  # set by split_in_worker for "init"

    def records(self, files: list[str]):
        for name in files:
            with open(name) as handle:
                for line in handle:
                    record = json.loads(line)
                    yield {"id": record["id"], "tokens": encode(record["text"])}

    def __iter__(self):
        if self.shard_by == "files":
            info = get_worker_info()
            files = self.files[info.id :: info.num_workers] if info is not None else self.files
            return self.records(files)
        if self.shard_by == "stride":
            info = get_worker_info()
            me, workers = (info.id, info.num_workers) if info is not None else (0, 1)
            return itertools.islice(self.records(self.files), me, None, workers)
        if self.shard_by == "init":
            return itertools.islice(self.records(self.files), self.worker, None, self.workers)
        return self.records(self.files)


def split_in_worker(worker_id: int) -> None:
    """``worker_init_fn`` that tells the worker's copy of the dataset which part is its own."""
    info = get_worker_info()
    info.dataset.worker, info.dataset.workers = info.id, info.num_workers


class RandomStream(IterableDataset):
    """Endless random vectors from the worker's ``torch`` generator (DataLoader seeds it
    per worker)."""

    def __iter__(self):
        while True:
            yield torch.rand(8)


def unsharded():
    return {"dataset": JsonlStream(_data_dir(), "none"), "batch_size": 16}


def sharded():
    return {"dataset": JsonlStream(_data_dir(), "files"), "batch_size": 16}


def strided():
    return {"dataset": JsonlStream(_data_dir(), "stride"), "batch_size": 16}


def init_sharded():
    return torch.utils.data.DataLoader(
        JsonlStream(_data_dir(), "init"), batch_size=16, worker_init_fn=split_in_worker
    )


def random_stream():
    return {"dataset": RandomStream(), "batch_size": 16}
