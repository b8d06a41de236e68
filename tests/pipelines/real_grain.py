"""A Google grain pipeline as a PyTorch user writes one (grain's own ``DataLoader``, its own worker
processes): a random-access source of encoded images, a decode ``MapTransform``, a random crop
and flip ``RandomMapTransform``, batches of 16. ``make_loader(worker_count=…)`` is the factory a
user hands stallscope; grain starts its workers at every epoch, and each reads ahead, so with
workers most of a short epoch is made during its start-up (NOTE [the first epoch])."""

from __future__ import annotations

import grain.python as gp
import numpy as np

ITEMS = 160
SIDE = 48


class EncodedImages(gp.RandomAccessDataSource):
    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> dict:
        pixels = np.random.default_rng(index).integers(0, 255, (SIDE, SIDE, 3), dtype=np.uint8)
        return {"raw": pixels.tobytes(), "label": index % 10}


class Decode(gp.MapTransform):
    def map(self, element: dict) -> dict:
        image = np.frombuffer(element["raw"], np.uint8).reshape(SIDE, SIDE, 3).astype(np.float32)
        for _ in range(3):  # a decoder's worth of arithmetic
            image = (image + np.roll(image, 1, 0) + np.roll(image, 1, 1)) / 3.0
        return {"image": image, "label": element["label"]}


class CropFlip(gp.RandomMapTransform):
    def random_map(self, element: dict, rng: np.random.Generator) -> dict:
        y, x = rng.integers(0, 9, size=2)
        image = element["image"][y : y + 40, x : x + 40]
        if rng.random() < 0.5:
            image = image[:, ::-1]
        return {"image": np.ascontiguousarray(image.transpose(2, 0, 1)), "label": element["label"]}


def make_loader(worker_count: int = 0, batch_size: int = 16) -> gp.DataLoader:
    source = EncodedImages()
    sampler = gp.IndexSampler(
        num_records=len(source),
        shuffle=True,
        seed=0,
        num_epochs=1,
        shard_options=gp.NoSharding(),
    )
    return gp.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(), CropFlip(), gp.Batch(batch_size=batch_size, drop_remainder=True)],
        worker_count=worker_count,
    )
