"""A translation loader shaped like fairseq's: token-budget buckets and a dict collater.

Sentence pairs of very different lengths live in one flat token file (read through a
memory map, opened lazily in each process); a ``batch_sampler`` groups sentences of
similar length so that every batch holds about ``max_tokens`` tokens (a few long
sentences or hundreds of short ones); the collater pads and returns a nested dict.
The loader is built with ``batch_size=None``-style usage: ``batch_sampler=`` and a
``collate_fn`` object, one worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from _datadir import cached_dir
from torch.utils.data import DataLoader, Dataset, Sampler

PAD, EOS, VOCAB = 1, 2, 8000
PAIRS = 6000
MAX_TOKENS = 4096


def _generate(folder: Path) -> None:
    rng = np.random.default_rng(1234)
    src_len = np.clip(rng.lognormal(3.0, 0.7, PAIRS).astype(np.int64), 3, 200)
    tgt_len = np.clip((src_len * rng.uniform(0.8, 1.25, PAIRS)).astype(np.int64), 3, 220)
    for side, lengths in (("src", src_len), ("tgt", tgt_len)):
        tokens = rng.integers(4, VOCAB, int(lengths.sum()), dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        np.save(folder / f"{side}.tokens.npy", tokens)
        np.save(folder / f"{side}.offsets.npy", offsets)


class PairDataset(Dataset):
    """Sentence pairs read from flat token files; memory maps are reopened per process."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.src_offsets = np.load(self.folder / "src.offsets.npy")
        self.tgt_offsets = np.load(self.folder / "tgt.offsets.npy")
        self.src_sizes = np.diff(self.src_offsets)
        self.tgt_sizes = np.diff(self.tgt_offsets)
        self._tokens: dict[str, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tokens"] = None  # a memory map is not sent to workers; each opens its own
        return state

    def _open(self) -> dict[str, np.ndarray]:
        if self._tokens is None:
            self._tokens = {
                side: np.load(self.folder / f"{side}.tokens.npy", mmap_mode="r")
                for side in ("src", "tgt")
            }
        return self._tokens

    def __len__(self) -> int:
        return len(self.src_sizes)

    def num_tokens(self, index: int) -> int:
        return int(max(self.src_sizes[index], self.tgt_sizes[index])) + 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        tokens = self._open()
        src = tokens["src"][self.src_offsets[index] : self.src_offsets[index + 1]]
        tgt = tokens["tgt"][self.tgt_offsets[index] : self.tgt_offsets[index + 1]]
        eos = np.array([EOS], dtype=np.int32)
        return {
            "id": index,
            "source": torch.from_numpy(np.concatenate([src, eos]).astype(np.int64)),
            "target": torch.from_numpy(np.concatenate([tgt, eos]).astype(np.int64)),
        }


class TokenBuckets(Sampler[list[int]]):
    """Batches of sentences of similar length holding at most ``max_tokens`` padded tokens.

    The batches are fixed once; each pass over the sampler (an epoch) visits them in
    a new seeded order, as fairseq's epoch iterator does.
    """

    def __init__(
        self, sizes: np.ndarray, max_tokens: int, *, seed: int = 1, shuffle: bool = True
    ) -> None:
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        order = np.lexsort((np.arange(len(sizes)), sizes))
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for index in order.tolist():
            size = int(sizes[index])
            if current and max(longest, size) * (len(current) + 1) > max_tokens:
                batches.append(current)
                current, longest = [], 0
            current.append(index)
            longest = max(longest, size)
        if current:
            batches.append(current)
        self.batches = batches

    def __iter__(self):
        order = np.arange(len(self.batches))
        if self.shuffle:
            np.random.RandomState(self.seed + self.epoch).shuffle(order)
        self.epoch += 1
        for position in order.tolist():
            yield list(self.batches[position])

    def __len__(self) -> int:
        return len(self.batches)


def _pad(rows: list[torch.Tensor], *, left: bool) -> torch.Tensor:
    width = max(len(row) for row in rows)
    out = torch.full((len(rows), width), PAD, dtype=torch.int64)
    for i, row in enumerate(rows):
        if left:
            out[i, width - len(row) :] = row
        else:
            out[i, : len(row)] = row
    return out


class Collater:
    """Pads a list of pairs into fairseq's nested batch dict, longest source first."""

    def __init__(self, pad: int = PAD, eos: int = EOS, left_pad_source: bool = True) -> None:
        self.pad = pad
        self.eos = eos
        self.left_pad_source = left_pad_source

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        samples = sorted(samples, key=lambda s: len(s["source"]), reverse=True)
        src = [s["source"] for s in samples]
        tgt = [s["target"] for s in samples]
        prev = [
            torch.cat([tgt_row[-1:], tgt_row[:-1]]) for tgt_row in tgt
        ]  # eos moved to the front
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.int64),
            "nsentences": len(samples),
            "ntokens": sum(len(t) for t in tgt),
            "net_input": {
                "src_tokens": _pad(src, left=self.left_pad_source),
                "src_lengths": torch.tensor([len(s) for s in src], dtype=torch.int64),
                "prev_output_tokens": _pad(prev, left=False),
            },
            "target": _pad(tgt, left=False),
        }


def make_dataset() -> PairDataset:
    return PairDataset(cached_dir("translation-v1", _generate))


def make_loader(num_workers: int = 1) -> DataLoader:
    """The user's loader (``num_workers`` only for tests that time it at other settings)."""
    dataset = make_dataset()
    sizes = np.maximum(dataset.src_sizes, dataset.tgt_sizes) + 1
    buckets = TokenBuckets(sizes, MAX_TOKENS, seed=1)
    return DataLoader(
        dataset, batch_sampler=buckets, collate_fn=Collater(), num_workers=num_workers
    )
