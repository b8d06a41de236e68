"""Hugging Face ``datasets`` pipelines built with the library's own defaults, over a small
in-memory ``Dataset`` of sentences (``Dataset.from_dict``; no hub access).

* :func:`make_loader` — map-style: ``Dataset.with_transform`` tokenizes on access (hashing words,
  no tokenizer model) and a padding collate builds ``input_ids``/``attention_mask``; a
  ``DataLoader`` built by a factory taking ``num_workers``.
* :func:`make_stream_loader` — the same rows as an ``IterableDataset``
  (``to_iterable_dataset(num_shards=4)``), which splits its shards between DataLoader workers
  itself.
* :func:`make_one_shard_stream_loader` — the same stream in one shard
  (``to_iterable_dataset(num_shards=1)``): with 2 workers the library stops the second.

TARGETs: ``tests/pipelines/real_hf_datasets.py:make_loader`` and ``...:make_stream_loader``.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch.utils.data import DataLoader

ROWS = 512


def _rows() -> dict[str, list[Any]]:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(600)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 48))) for _ in range(ROWS)]
    return {"text": texts, "label": [i % 5 for i in range(ROWS)]}


def _ids(text: str) -> list[int]:
    out = []
    for word in text.split():
        value = 0
        for ch in word * 16:
            value = (value * 31 + ord(ch)) % 30000
        out.append(value)
    return out


def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A ``with_transform`` function: rows of text to rows of token ids."""
    return {"input_ids": [_ids(t) for t in batch["text"]], "label": batch["label"]}


def pad(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pads token ids to the longest of the batch (a tokenizer-free padding collate)."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for row, item in enumerate(items):
        tokens = item["input_ids"]
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    labels = torch.tensor([item["label"] for item in items])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def make_loader(num_workers: int = 0) -> DataLoader:
    from datasets import Dataset

    dataset = Dataset.from_dict(_rows()).with_transform(tokenize)
    return DataLoader(dataset, batch_size=16, collate_fn=pad, num_workers=num_workers)


def _encode_row(row: dict[str, Any]) -> dict[str, Any]:
    return {"input_ids": _ids(row["text"]), "label": row["label"]}


def make_stream_loader(num_workers: int = 0) -> DataLoader:
    from datasets import Dataset

    stream = Dataset.from_dict(_rows()).to_iterable_dataset(num_shards=4).map(_encode_row)
    return DataLoader(stream, batch_size=16, collate_fn=pad, num_workers=num_workers)


def make_one_shard_stream_loader(num_workers: int = 0) -> DataLoader:
    from datasets import Dataset

    stream = Dataset.from_dict(_rows()).to_iterable_dataset(num_shards=1).map(_encode_row)
    return DataLoader(stream, batch_size=16, collate_fn=pad, num_workers=num_workers)
