"""An object-detection loader shaped like YOLO's: OpenCV decode, 4-image mosaic, affine.

Images (JPEG and PNG, various sizes) sit on disk with one label file each (class,
centre x, centre y, width, height; normalised; a variable number of boxes, possibly
none). ``__getitem__`` decodes four images with ``cv2.imread``, tiles them around a
random centre, applies a random affine warp and horizontal flip, and returns a CHW
uint8 tensor with its boxes. ``collate_fn`` stacks images and concatenates the boxes,
writing each box's image index into column 0. ``InfiniteDataLoader`` starts its
iterator in its constructor (so its workers start when it is built) and reuses it
across epochs.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from _datadir import cached_dir
from torch.utils.data import DataLoader, Dataset

IMAGES = 96
IMG_SIZE = 160


def _generate(folder: Path) -> None:
    rng = np.random.default_rng(7)
    for i in range(IMAGES):
        h, w = int(rng.integers(110, 220)), int(rng.integers(110, 220))
        image = np.full((h, w, 3), rng.integers(40, 200, 3), dtype=np.uint8)
        image = cv2.add(image, rng.integers(0, 30, (h, w, 3), dtype=np.uint8))
        lines = []
        for _ in range(int(rng.integers(0, 7))):
            bw, bh = int(rng.integers(12, w // 2)), int(rng.integers(12, h // 2))
            x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            color = tuple(int(c) for c in rng.integers(0, 255, 3))
            cv2.rectangle(image, (x0, y0), (x0 + bw, y0 + bh), color, -1)
            cls = int(rng.integers(0, 5))
            lines.append(
                f"{cls} {(x0 + bw / 2) / w:.6f} {(y0 + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}"
            )
        suffix = ".png" if i % 4 == 0 else ".jpg"
        cv2.imwrite(str(folder / f"{i:04d}{suffix}"), image)
        (folder / f"{i:04d}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))


def _read_labels(path: Path) -> np.ndarray:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return np.array(rows, dtype=np.float32).reshape(-1, 5)


def _affine(image: np.ndarray, boxes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Random rotation, scale, shear and translation of the mosaic down to ``size``."""
    border = size // 2
    height, width = image.shape[:2]
    centre = np.eye(3)
    centre[0, 2], centre[1, 2] = -width / 2, -height / 2
    rotate = np.eye(3)
    rotate[:2] = cv2.getRotationMatrix2D((0, 0), random.uniform(-10, 10), random.uniform(0.6, 1.4))
    shear = np.eye(3)
    shear[0, 1] = math.tan(math.radians(random.uniform(-2, 2)))
    shear[1, 0] = math.tan(math.radians(random.uniform(-2, 2)))
    shift = np.eye(3)
    shift[0, 2] = random.uniform(0.4, 0.6) * (width - 2 * border)
    shift[1, 2] = random.uniform(0.4, 0.6) * (height - 2 * border)
    matrix = shift @ shear @ rotate @ centre
    out = cv2.warpAffine(image, matrix[:2], dsize=(size, size), borderValue=(114, 114, 114))
    if len(boxes):
        corners = np.ones((len(boxes) * 4, 3))
        corners[:, :2] = boxes[:, [1, 2, 3, 4, 1, 4, 3, 2]].reshape(-1, 2)
        corners = (corners @ matrix.T)[:, :2].reshape(len(boxes), 8)
        xs, ys = corners[:, [0, 2, 4, 6]], corners[:, [1, 3, 5, 7]]
        moved = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], 1).clip(0, size)
        keep = ((moved[:, 2] - moved[:, 0]) > 2) & ((moved[:, 3] - moved[:, 1]) > 2)
        boxes = np.concatenate([boxes[keep, :1], moved[keep]], 1).astype(np.float32)
    return out, boxes


class MosaicDataset(Dataset):
    """Four images per sample, tiled and warped; boxes as (class, x1, y1, x2, y2) pixels."""

    def __init__(self, folder: Path, img_size: int = IMG_SIZE, flip: float = 0.5) -> None:
        self.files = sorted(p for p in Path(folder).iterdir() if p.suffix in {".jpg", ".png"})
        self.labels = [_read_labels(p.with_suffix(".txt")) for p in self.files]
        self.img_size = img_size
        self.flip = flip

    def __len__(self) -> int:
        return len(self.files)

    def _load(self, index: int) -> np.ndarray:
        image = cv2.imread(str(self.files[index]))
        if image is None:
            raise FileNotFoundError(self.files[index])
        h, w = image.shape[:2]
        scale = self.img_size / max(h, w)
        return cv2.resize(
            image,
            (max(1, round(w * scale)), max(1, round(h * scale))),
            interpolation=cv2.INTER_LINEAR,
        )

    def _mosaic(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.img_size
        cx, cy = (int(random.uniform(s * 0.5, s * 1.5)) for _ in range(2))
        canvas = np.full((2 * s, 2 * s, 3), 114, dtype=np.uint8)
        picks = [index] + random.choices(range(len(self)), k=3)
        all_boxes = []
        for corner, pick in enumerate(picks):
            image = self._load(pick)
            h, w = image.shape[:2]
            x0 = cx - w if corner in (0, 2) else cx
            y0 = cy - h if corner in (0, 1) else cy
            xa, ya = max(x0, 0), max(y0, 0)
            xb, yb = min(x0 + w, 2 * s), min(y0 + h, 2 * s)
            canvas[ya:yb, xa:xb] = image[ya - y0 : yb - y0, xa - x0 : xb - x0]
            labels = self.labels[pick]
            if len(labels):
                boxes = labels.copy()
                boxes[:, 1] = w * (labels[:, 1] - labels[:, 3] / 2) + x0
                boxes[:, 2] = h * (labels[:, 2] - labels[:, 4] / 2) + y0
                boxes[:, 3] = w * (labels[:, 1] + labels[:, 3] / 2) + x0
                boxes[:, 4] = h * (labels[:, 2] + labels[:, 4] / 2) + y0
                all_boxes.append(boxes)
        boxes = np.concatenate(all_boxes, 0) if all_boxes else np.zeros((0, 5), np.float32)
        boxes[:, 1:] = boxes[:, 1:].clip(0, 2 * s)
        return canvas, boxes

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, str, tuple[int, int]]:
        canvas, boxes = self._mosaic(index)
        image, boxes = _affine(canvas, boxes, self.img_size)
        if random.random() < self.flip:
            image = np.ascontiguousarray(image[:, ::-1])
            if len(boxes):
                boxes[:, [1, 3]] = self.img_size - boxes[:, [3, 1]]
        labels = torch.zeros((len(boxes), 6))
        if len(boxes):
            labels[:, 1:] = torch.from_numpy(boxes)
        chw = np.ascontiguousarray(image.transpose(2, 0, 1)[::-1])  # BGR HWC -> RGB CHW
        return torch.from_numpy(chw), labels, str(self.files[index]), (self.img_size, self.img_size)


def collate_fn(
    batch: list[tuple[Any, ...]],
) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...], tuple[Any, ...]]:
    images, labels, paths, shapes = zip(*batch)
    for i, boxes in enumerate(labels):
        boxes[:, 0] = i  # which image of the batch each box belongs to
    return torch.stack(images, 0), torch.cat(labels, 0), paths, shapes


def seed_worker(worker_id: int) -> None:
    """The project's own worker seeding: NumPy and random from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class _RepeatSampler:
    """Repeats a batch sampler forever, so the loader's workers survive epochs."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self):
        while True:
            yield from iter(self.sampler)


class InfiniteDataLoader(DataLoader):
    """Builds its iterator (and so starts its workers) in the constructor; epochs reuse it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "batch_sampler", _RepeatSampler(self.batch_sampler))
        self.iterator = super().__iter__()

    def __len__(self) -> int:
        return len(self.batch_sampler.sampler)

    def __iter__(self):
        for _ in range(len(self)):
            yield next(self.iterator)


def make_dataset() -> MosaicDataset:
    return MosaicDataset(cached_dir("detection-v1", _generate))


def make_loader(num_workers: int = 2) -> InfiniteDataLoader:
    """The user's loader (``num_workers`` only for tests that time it at other settings)."""
    generator = torch.Generator()
    generator.manual_seed(0)
    return InfiniteDataLoader(
        make_dataset(),
        batch_size=8,
        shuffle=True,
        num_workers=num_workers,
        pin_memory=False,
        collate_fn=collate_fn,
        worker_init_fn=seed_worker,
        generator=generator,
    )
