"""A torchtitan-style loader: a ``StatefulDataLoader`` subclass whose constructor takes required
keyword-only arguments (rank, world size, tokenizer, sequence length, batch size) and builds its
own streaming dataset, made by a factory that takes ``num_workers=`` and passes it on.

The stream tokenizes text by hashing words (pure Python work per sample), splits its documents
by rank and by DataLoader worker, and packs the tokens into fixed-length samples.

TARGET: ``tests/pipelines/real_stateful_subclass.py:make_loader``.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

DOCUMENTS = 600


class HashTokenizer:
    """Words to ids by a slow hash (stands in for a real tokenizer's per-document cost)."""

    def __init__(self, vocab: int = 32000) -> None:
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        out = []
        for word in text.split():
            value = 0
            for ch in word * 30:
                value = (value * 31 + ord(ch)) % self.vocab
            out.append(value)
        return out


class PackedText(IterableDataset):
    """Documents ``rank, rank + world_size, ...``, split again by worker, tokenized and packed into
    samples of ``seq_len + 1`` tokens (input and shifted label)."""

    def __init__(self, tokenizer: HashTokenizer, seq_len: int, rank: int, world_size: int) -> None:
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.rank = rank
        self.world_size = world_size
        rng = random.Random(0)
        words = [f"tok{i}" for i in range(800)]
        self.documents = [
            " ".join(rng.choice(words) for _ in range(rng.randint(40, 160)))
            for _ in range(DOCUMENTS)
        ]

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        step = self.world_size * workers
        buffer: list[int] = []
        for doc in self.documents[self.rank * workers + worker :: step]:
            buffer.extend(self.tokenizer.encode(doc))
            while len(buffer) > self.seq_len:
                chunk, buffer = buffer[: self.seq_len + 1], buffer[self.seq_len :]
                tokens = torch.tensor(chunk, dtype=torch.long)
                yield {"input": tokens[:-1]}, tokens[1:]


class ParallelAwareLoader(StatefulDataLoader):
    """Builds its own dataset from the run's settings; every one of them must be named."""

    def __init__(
        self,
        *,
        tokenizer: HashTokenizer,
        seq_len: int,
        dp_rank: int,
        dp_world_size: int,
        batch_size: int,
        num_workers: int = 0,
    ) -> None:
        self.dp_rank = dp_rank
        self.dp_world_size = dp_world_size
        dataset = PackedText(tokenizer, seq_len, dp_rank, dp_world_size)
        super().__init__(dataset, batch_size=batch_size, num_workers=num_workers)
        self._rank_id = f"dp_rank_{dp_rank}"

    def state_dict(self) -> dict[str, Any]:
        return {self._rank_id: super().state_dict(), "world_size": self.dp_world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict[self._rank_id])


def make_loader(num_workers: int | None = None) -> ParallelAwareLoader:
    """The project's builder: ``num_workers=None`` takes the project's default (none)."""
    return ParallelAwareLoader(
        tokenizer=HashTokenizer(),
        seq_len=256,
        dp_rank=0,
        dp_world_size=1,
        batch_size=8,
        num_workers=0 if num_workers is None else num_workers,
    )
