"""An LLM pre-training loader, the way current training code builds one (issue 17).

- ``PretrainLoader`` is a ``torchdata.stateful_dataloader.StatefulDataLoader`` subclass
  whose constructor takes required keyword-only arguments (``tokenizer``, ``seq_len``,
  ``rank``, ``world_size``): it cannot be rebuilt by calling its class with a dataset.
- ``PackedTextStream`` is a streaming ``IterableDataset`` that shards itself by rank
  and by DataLoader worker (``get_worker_info()``), tokenizes synthetic text with a
  small pure-Python byte-pair tokenizer (a few ms of CPU per packed sequence) and
  packs the tokens into fixed-length sequences: items are dicts of int64 tensors.
- ``MergeTokenizer`` keeps its merge ranks as a torch tensor and pickles them as a
  NumPy array, rebuilding the tensor in ``__setstate__`` (``torch.as_tensor(...)``), as
  tokenizers with array-backed vocabularies do: an object that only loads from its
  real payload.

TARGET: ``tests/pipelines/real_lm_stream.py:make_loader``.
"""

from __future__ import annotations

import random
import unicodedata
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

_SYLLABLES = [
    "ka",
    "to",
    "ri",
    "mo",
    "ne",
    "sa",
    "lu",
    "pe",
    "di",
    "vo",
    "an",
    "el",
    "or",
    "is",
    "um",
    "ex",
    "qu",
    "th",
]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 5)))


class MergeTokenizer:
    """Byte-level tokenizer with greedy pair merges (a toy BPE), all in Python."""

    def __init__(self, merges: int = 120, seed: int = 0) -> None:
        # Learn merges as BPE does: repeatedly merge the most frequent adjacent pair of a small
        # corpus.
        rng = random.Random(seed)
        words = [list(_word(rng).encode()) for _ in range(200)]
        pairs: list[tuple[int, int]] = []
        for new_id in range(256, 256 + merges):
            counts: dict[tuple[int, int], int] = {}
            for ids in words:
                for pair in zip(ids, ids[1:]):
                    counts[pair] = counts.get(pair, 0) + 1
            if not counts:
                break
            best = max(counts, key=counts.__getitem__)
            pairs.append(best)
            for ids in words:
                i = 0
                while i < len(ids) - 1:
                    if (ids[i], ids[i + 1]) == best:
                        ids[i : i + 2] = [new_id]
                    i += 1
        self.ranks = torch.tensor(pairs, dtype=torch.int64)
        self._build()

    def _build(self) -> None:
        self.merge_of = {(int(a), int(b)): 256 + i for i, (a, b) in enumerate(self.ranks.tolist())}
        self.vocab_size = 256 + len(self.merge_of)
        self.eos = self.vocab_size

    def __getstate__(self) -> dict[str, Any]:
        return {"ranks": self.ranks.numpy().copy()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.ranks = torch.as_tensor(state["ranks"])
        self._build()

    def encode(self, text: str) -> list[int]:
        """Byte-pair encoding: merge the lowest-ranked adjacent pair until none is left
        (no cache)."""
        out: list[int] = []
        merge_of = self.merge_of
        for word in unicodedata.normalize("NFKC", text).lower().split():
            ids = list(word.encode())
            while len(ids) > 1:
                best = min(
                    range(len(ids) - 1), key=lambda i: merge_of.get((ids[i], ids[i + 1]), 1 << 30)
                )
                merged = merge_of.get((ids[best], ids[best + 1]))
                if merged is None:
                    break
                ids[best : best + 2] = [merged]
            out.extend(ids)
            out.append(32)
        out.append(self.eos)
        return out


class PackedTextStream(IterableDataset):
    """Documents ``rank, rank + world_size, ...`` split again by worker, tokenized and packed."""

    def __init__(
        self,
        tokenizer: MergeTokenizer,
        *,
        seq_len: int,
        rank: int,
        world_size: int,
        documents: int = 480,
        seed: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.rank = rank
        self.world_size = world_size
        self.documents = documents
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _document(self, index: int) -> str:
        rng = random.Random(self.seed * 1_000_003 + index)
        return " ".join(_word(rng) for _ in range(rng.randint(300, 900)))

    def _my_documents(self) -> range:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards = self.world_size * workers
        return range(self.rank * workers + worker, self.documents, shards)

    def __iter__(self):
        buffer: list[int] = []
        for index in self._my_documents():
            buffer.extend(self.tokenizer.encode(self._document(index)))
            while len(buffer) >= self.seq_len + 1:
                chunk = torch.tensor(buffer[: self.seq_len + 1], dtype=torch.int64)
                del buffer[: self.seq_len]
                yield {
                    "input_ids": chunk[:-1].clone(),
                    "labels": chunk[1:].clone(),
                    "attention_mask": torch.ones(self.seq_len, dtype=torch.int64),
                }


class PretrainLoader(StatefulDataLoader):
    """The project's loader: built from a tokenizer and the rank layout, never from a dataset."""

    def __init__(
        self,
        *,
        tokenizer: MergeTokenizer,
        seq_len: int,
        rank: int,
        world_size: int,
        batch_size: int = 8,
        num_workers: int = 2,
        **kwargs: Any,
    ) -> None:
        self.seq_len = seq_len
        self.rank = rank
        self.world_size = world_size
        dataset = PackedTextStream(tokenizer, seq_len=seq_len, rank=rank, world_size=world_size)
        super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, **kwargs)


def make_loader() -> PretrainLoader:
    return PretrainLoader(
        tokenizer=MergeTokenizer(), seq_len=1024, rank=0, world_size=1, batch_size=8, num_workers=2
    )
