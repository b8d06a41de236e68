"""A streaming dataset library's loader, the way such libraries ship one (issue 17).

- ``ShardedRecordStream`` is an ``IterableDataset`` that shards itself by rank and by
  DataLoader worker (``get_worker_info()``) and shuffles through a per-epoch buffer:
  each epoch it fills the buffer with its shard's records (tens of MB), yields them
  in shuffled order and frees it, so worker memory rises and returns to its start
  every epoch. That is not a leak.
- ``StreamingLoader`` is the library's ``DataLoader`` subclass with its own collate,
  ``PadCollate``, which returns ``Features``: a ``collections.UserDict`` subclass (a
  ``Mapping`` that is not a ``dict``), as transformers' ``BatchEncoding`` is.
- ``LeakingRecordStream`` is the same stream with a real leak: it keeps every record
  it has yielded, across epochs (``make_leaking_loader``).

TARGETs: ``tests/pipelines/real_streaming_lib.py:make_loader`` and ``...:make_leaking_loader``.
"""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Features(collections.UserDict):
    """A batch of named tensors (a Mapping, not a dict), with a ``to()`` like BatchEncoding's."""

    def to(self, device: Any) -> Features:
        return Features(
            {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.items()}
        )


class ShardedRecordStream(IterableDataset):
    """Records ``rank, rank + world_size, ...``, split again by worker, shuffled through
    a buffer."""

    def __init__(
        self,
        records: int = 800,
        *,
        rank: int = 0,
        world_size: int = 1,
        record_kb: int = 96,
        seed: int = 0,
    ) -> None:
        self.records = records
        self.rank = rank
        self.world_size = world_size
        self.record_kb = record_kb
        self.seed = seed
        self.epoch = 0

    def _shard(self) -> range:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards = self.world_size * workers
        return range(self.rank * workers + worker, self.records, shards)

    def _record(self, index: int) -> dict[str, Any]:
        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        length = int(
            rng.integers(self.record_kb * 128, self.record_kb * 256)
        )  # int32 tokens: record_kb/2 .. record_kb
        return {"id": index, "tokens": rng.integers(0, 50_000, size=length, dtype=np.int32)}

    def _keep(self, record: dict[str, Any]) -> None:
        """Nothing is kept beyond the epoch's buffer (the leaking variant overrides this)."""

    def __iter__(self):
        order = random.Random(self.seed + self.epoch)
        self.epoch += 1
        buffer = [self._record(index) for index in self._shard()]  # the epoch's shuffle buffer
        order.shuffle(buffer)
        while buffer:
            record = buffer.pop()
            self._keep(record)
            yield record
        del buffer  # freed at the end of every epoch


class LeakingRecordStream(ShardedRecordStream):
    """Keeps every record it yields, across epochs: memory grows epoch after epoch."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[np.ndarray] = []

    def _keep(self, record: dict[str, Any]) -> None:
        self.seen.append(record["tokens"].copy())


class PadCollate:
    """Pads the variable-length token arrays to the longest and returns ``Features``."""

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = pad_id

    def __call__(self, records: list[dict[str, Any]]) -> Features:
        longest = max(len(r["tokens"]) for r in records)
        ids = torch.full((len(records), longest), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(records), longest), dtype=torch.int64)
        for row, record in enumerate(records):
            n = len(record["tokens"])
            ids[row, :n] = torch.from_numpy(record["tokens"].astype(np.int64))
            mask[row, :n] = 1
        return Features(
            {
                "input_ids": ids,
                "attention_mask": mask,
                "ids": torch.tensor([r["id"] for r in records]),
            }
        )


class StreamingLoader(DataLoader):
    """The library's loader: its own collate, its dataset's sharding."""

    def __init__(
        self, dataset: ShardedRecordStream, batch_size: int = 8, num_workers: int = 2, **kwargs: Any
    ) -> None:
        kwargs.setdefault("collate_fn", PadCollate())
        super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, **kwargs)


def make_loader() -> StreamingLoader:
    return StreamingLoader(ShardedRecordStream(), batch_size=8, num_workers=2)


def make_leaking_loader() -> StreamingLoader:
    return StreamingLoader(LeakingRecordStream(), batch_size=8, num_workers=2)
