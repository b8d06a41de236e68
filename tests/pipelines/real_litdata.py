"""litdata's ``StreamingDataLoader`` over a ``StreamingDataset``, built with the library's own
defaults over a small optimized data set written with litdata's ``BinaryWriter`` (chunks and an
``index.json``, what ``litdata.optimize`` writes).

TARGET: ``tests/pipelines/real_litdata.py:make_loader`` (the factory takes ``num_workers``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from litdata import StreamingDataLoader, StreamingDataset

sys.path.insert(0, str(Path(__file__).parent))
from _datadir import cached_dir  # noqa: E402

ITEMS = 256
SIDE = 48


def _write(folder: Path) -> None:
    from litdata.streaming.writer import BinaryWriter

    rng = np.random.default_rng(0)
    writer = BinaryWriter(str(folder), chunk_bytes="256KB")
    for i in range(ITEMS):
        image = rng.integers(0, 255, (SIDE, SIDE, 3), dtype=np.uint8)
        writer.add_item(i, {"index": i, "image": image, "label": i % 10})
    writer.done()
    writer.merge()


def data_dir() -> str:
    return str(cached_dir("litdata-v1", _write))


class NormalisedImages(StreamingDataset):
    """Turns each stored image into a normalised float tensor (a transform per item)."""

    def __getitem__(self, index: object) -> dict[str, object]:
        item = super().__getitem__(index)
        image = torch.from_numpy(np.asarray(item["image"], dtype=np.float32) / 255.0)
        return {"image": image.permute(2, 0, 1), "label": int(item["label"])}


def make_loader(num_workers: int = 0, batch_size: int = 16) -> StreamingDataLoader:
    return StreamingDataLoader(
        NormalisedImages(data_dir()), batch_size=batch_size, num_workers=num_workers
    )
