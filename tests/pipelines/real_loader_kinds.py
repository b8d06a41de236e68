"""Loaders that are not a plain DataLoader, shaped like the ones real projects build.

* :func:`nodes_graph` — a ``torchdata.nodes`` graph (sampler → ParallelMapper that decodes
  JPEGs → Batcher → collate → Prefetcher → Loader) from a factory taking ``num_workers``
  and ``method`` (thread or process mappers).
* :func:`nodes_fixed` — the same graph from a factory without parameters.
* :func:`torch_loader` / :func:`stateful_loader` — a torch ``DataLoader`` and a torchdata
  ``StatefulDataLoader`` over the same JPEG dataset, from factories taking ``num_workers``.
* :func:`wrapped_loader` — an object that holds a DataLoader and post-processes its batches
  (a "device loader" or data-module pipeline, as training frameworks build).
* :func:`mapping_batches` — a DataLoader whose collate pads token sequences into a
  ``UserDict``-based batch (the way tokenizers' batch encodings are), not a ``dict``.
* :func:`batch_stream` — an iterable of ready batches with no knobs at all.
* :func:`threaded_stream` — the same from a factory taking ``threads``: trials call it with
  other values.
"""

from __future__ import annotations

import io
import random
import threading
import time
from collections import UserDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

IMAGES = 48
SIDE = 96


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)
    image = Image.fromarray(base).resize((SIDE, SIDE), Image.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


_BLOBS: list[bytes] = [_jpeg(i) for i in range(IMAGES)]


class JpegDataset(Dataset):
    """Decodes an in-memory JPEG, crops and flips it: a few ms of CPU per item."""

    def __init__(self, size: int = 512, crop: int = 80) -> None:
        self.size = size
        self.crop = crop

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.open(io.BytesIO(_BLOBS[index % IMAGES])).convert("RGB")
        array = np.asarray(image)
        top = (index * 7) % (SIDE - self.crop)
        array = array[top : top + self.crop, top : top + self.crop]
        if index % 2:
            array = array[:, ::-1]
        # A little more work per item, as a colour transform would be.
        array = np.clip(array.astype(np.float32) * 1.1, 0, 255).astype(np.uint8)
        return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1), index % 10


def _collate(items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([image for image, _ in items])
    labels = torch.tensor([label for _, label in items])
    return images, labels


def nodes_graph(num_workers: int = 2, method: str = "thread", batch_size: int = 8):
    """A torchdata.nodes graph from a factory whose parameters are knobs."""
    import torchdata.nodes as tn
    from torch.utils.data import SequentialSampler

    dataset = JpegDataset()
    node = tn.SamplerWrapper(SequentialSampler(dataset))
    node = tn.ParallelMapper(
        node, map_fn=dataset.__getitem__, num_workers=num_workers, method=method
    )
    node = tn.Batcher(node, batch_size=batch_size, drop_last=True)
    node = tn.Mapper(node, _collate)
    node = tn.Prefetcher(node, prefetch_factor=2)
    return tn.Loader(node)


def torch_loader(num_workers: int = 0) -> DataLoader:
    """A plain torch DataLoader with its own defaults but the worker count."""
    return DataLoader(JpegDataset(), batch_size=8, num_workers=num_workers, collate_fn=_collate)


def stateful_loader(num_workers: int = 0):
    """torchdata's StatefulDataLoader, built as the torch one."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(
        JpegDataset(), batch_size=8, num_workers=num_workers, collate_fn=_collate
    )


def nodes_fixed():
    """The same graph, built without parameters: its nodes' own settings are the knobs."""
    return nodes_graph(num_workers=1)


class DeviceLoader:
    """Holds a DataLoader and turns each batch into normalised float inputs (as a framework's
    device-transfer wrapper does); iterating it iterates the loader."""

    def __init__(self, loader: DataLoader, scale: float = 1 / 255) -> None:
        self.loader = loader
        self.scale = scale

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for images, labels in self.loader:
            yield {"inputs": images.float() * self.scale, "labels": labels}


def wrapped_loader() -> DeviceLoader:
    return DeviceLoader(DataLoader(JpegDataset(), batch_size=8, num_workers=1, collate_fn=_collate))


class TokenBatch(UserDict):
    """A padded batch of token ids, a Mapping but not a dict (like a tokenizer's batch encoding)."""

    def to(self, device: str) -> TokenBatch:
        return TokenBatch({k: v.to(device) for k, v in self.items()})


class Sentences(Dataset):
    """Sentences of 8 to 40 tokens, 'tokenized' by hashing words (pure Python work per item)."""

    def __init__(self, size: int = 256) -> None:
        rng = random.Random(0)
        words = [f"w{i}" for i in range(500)]
        self.texts = [
            " ".join(rng.choice(words) for _ in range(rng.randint(8, 40))) for _ in range(size)
        ]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> list[int]:
        out = []
        for word in self.texts[index].split():
            value = 0
            for ch in word * 20:
                value = (value * 31 + ord(ch)) % 30000
            out.append(value)
        return out


def pad_tokens(items: list[list[int]]) -> TokenBatch:
    width = max(len(t) for t in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for row, tokens in enumerate(items):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    return TokenBatch(input_ids=ids, attention_mask=mask)


def mapping_batches() -> DataLoader:
    return DataLoader(Sentences(), batch_size=16, collate_fn=pad_tokens)


class Recordings(Dataset):
    """Automatic batching off, as speech toolkits' datasets are (a bucketing sampler yields a set of
    cuts): ``__getitem__`` takes what the sampler yields, here a list of indices, and returns the
    whole batch; an integer index is refused, as such datasets refuse it."""

    def __init__(self, size: int = 480) -> None:
        self.features = torch.randn(size, 20, 8)

    def __getitem__(self, picked: list[int]) -> dict[str, torch.Tensor]:
        if not isinstance(picked, list):
            raise TypeError(f"Recordings takes a list of indices from its sampler, not {picked!r}")
        frames = self.features[picked]
        for _ in range(4):
            frames = torch.tanh(frames * 1.01)
        return {"frames": frames, "ids": torch.tensor(picked)}


def sampled_batches(num_workers: int = 0) -> DataLoader:
    sampler = BatchSampler(RandomSampler(range(480)), batch_size=16, drop_last=False)
    return DataLoader(Recordings(), sampler=sampler, batch_size=None, num_workers=num_workers)


class BatchStream:
    """Ready batches made on the fly by ``threads`` threads, no DataLoader involved: each batch
    waits 8 ms (a remote read) and costs a little CPU."""

    def __init__(self, batches: int = 60, batch_size: int = 4, threads: int = 1) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.threads = threads
        self._lock = threading.Lock()

    def _make(self, i: int) -> torch.Tensor:
        time.sleep(0.008)
        return torch.full((self.batch_size, 16), float(i))

    def __iter__(self):
        with ThreadPoolExecutor(self.threads) as pool:
            yield from pool.map(self._make, range(self.batches))


def batch_stream() -> BatchStream:
    return BatchStream()


def threaded_stream(threads: int = 1) -> BatchStream:
    return BatchStream(threads=threads)


class ShardedTextLoader(DataLoader):
    """A DataLoader subclass whose constructor takes required keyword-only arguments and builds
    its own dataset (as LLM pre-training loaders do): it cannot be called with DataLoader's."""

    def __init__(
        self,
        *,
        corpus_size: int,
        rank: int,
        world_size: int,
        batch_size: int = 16,
        num_workers: int = 0,
    ) -> None:
        self.corpus_size = corpus_size
        self.rank = rank
        self.world_size = world_size
        dataset = Sentences(corpus_size)
        indices = list(range(rank, corpus_size, world_size))
        super().__init__(
            torch.utils.data.Subset(dataset, indices),
            batch_size=batch_size,
            num_workers=num_workers,
            collate_fn=pad_tokens,
        )

    def __iter__(self):
        # Its own iterator: counts the batches it hands out (state a subclass keeps).
        self.handed_out = 0
        for batch in super().__iter__():
            self.handed_out += 1
            yield batch


def sharded_text() -> ShardedTextLoader:
    return ShardedTextLoader(corpus_size=512, rank=0, world_size=2, num_workers=1)


def stateful_text():
    """torchdata's StatefulDataLoader over the same sentences (snapshot_every_n_steps is a knob)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(Sentences(512), batch_size=16, num_workers=1, collate_fn=pad_tokens)
