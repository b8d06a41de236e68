"""webdataset pipelines built with the library's own defaults, over small tar shards written
with ``wds.ShardWriter`` (NOTE [unsharded streams] in ``checks/sharding.py``).

* :func:`make_loader` — ``wds.WebLoader`` over ``wds.WebDataset(urls, nodesplitter=…,
  workersplitter=split_by_worker)`` with the batches built inside the workers
  (``.batched(16)``, ``batch_size=None``), the way webdataset's examples do; the factory takes
  ``num_workers``.
* :func:`make_fixed_loader` — :func:`make_loader`'s loader from a function without parameters:
  the ``WebLoader`` is measured and tuned through the DataLoader it holds.
* :func:`make_unsplit_loader` — the same without splitting the shards by worker
  (``workersplitter=None``): every worker reads every shard, so each sample comes once per worker.

TARGETs: ``tests/pipelines/real_webdataset.py:make_loader`` and ``...:make_unsplit_loader``.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from _datadir import cached_dir  # noqa: E402

SHARDS = 8
PER_SHARD = 24
SIDE = 64
BATCH = 16


def _write_shards(folder: Path) -> None:
    import webdataset as wds

    rng = np.random.default_rng(0)
    with wds.ShardWriter(str(folder / "shard-%04d.tar"), maxcount=PER_SHARD, verbose=0) as sink:
        for i in range(SHARDS * PER_SHARD):
            base = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(base).resize((SIDE, SIDE), Image.BILINEAR).save(out, format="JPEG")
            sink.write({"__key__": f"sample{i:05d}", "jpg": out.getvalue(), "cls": str(i % 10)})


def shard_urls() -> list[str]:
    folder = cached_dir("webdataset-v2", _write_shards)
    return sorted(str(p) for p in folder.glob("shard-*.tar"))


def _to_tensor(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(array).permute(2, 0, 1)


def _dataset(split: bool):
    import webdataset as wds

    return (
        wds.WebDataset(
            shard_urls(),
            shardshuffle=False,
            nodesplitter=wds.split_by_node,
            workersplitter=wds.split_by_worker if split else None,
        )
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(_to_tensor, int)
        .batched(BATCH)
    )


def make_loader(num_workers: int = 2):
    import webdataset as wds

    return wds.WebLoader(_dataset(split=True), batch_size=None, num_workers=num_workers)


def make_unsplit_loader(num_workers: int = 2):
    import webdataset as wds

    return wds.WebLoader(_dataset(split=False), batch_size=None, num_workers=num_workers)


def make_fixed_loader():
    return make_loader()
