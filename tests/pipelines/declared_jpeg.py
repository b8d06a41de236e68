"""Real JPEG decoding in pipelines that declare their own stages (NOTE [declared stages] in
stallscope/breakdown/declared.py): no injected sleeps, the work is Pillow's.

Files are small photo-like JPEGs written once (seeded) into a cached folder (``_datadir``):
``FILES`` of 320×240. Each pipeline reads a file's bytes, decodes them with Pillow, augments the
image (a random crop, a flip, a float conversion with normalisation) and collates batches:

* :func:`nodes_jpeg_threads` / :func:`nodes_jpeg_processes` — a ``torchdata.nodes`` graph:
  sampler → ``Mapper(read_bytes)`` → ``ParallelMapper(decode, 2 workers)`` →
  ``ParallelMapper(augment, 2 workers)`` → ``Batcher`` → ``Mapper(collate)`` → ``Prefetcher``;
* :func:`pool_jpeg` — a ``ThreadPoolExecutor`` pipeline with the same stages as methods;
* :func:`mpire_jpeg` — the same stages mapped by mpire's ``WorkerPool`` with threads.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from _datadir import cached_dir
from PIL import Image

WIDTH, HEIGHT = 320, 240
CROP = 192
FILES = 96
BATCH = 16
EPOCH_REPEATS = 8  # the files 8 times over: 48 batches an epoch, a measurement stays in one
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _paint(index: int) -> np.ndarray:
    rng = np.random.default_rng(500 + index)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    image = np.empty((HEIGHT, WIDTH, 3), np.float32)
    for c in range(3):
        a, b = rng.uniform(0.005, 0.04, 2)
        image[..., c] = 128 + 90 * np.sin(a * x + b * y + rng.uniform(0, 6.28))
    image += rng.normal(0, 14, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _write(folder: Path) -> None:
    for i in range(FILES):
        Image.fromarray(_paint(i)).save(folder / f"{i:04d}.jpg", "JPEG", quality=90)


def jpeg_paths() -> list[str]:
    folder = cached_dir(f"declared-jpegs-{WIDTH}x{HEIGHT}-{FILES}-v1", _write)
    return [str(p) for p in sorted(folder.glob("*.jpg"))]


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def augment(image: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng()
    top = int(rng.integers(0, image.shape[0] - CROP + 1))
    left = int(rng.integers(0, image.shape[1] - CROP + 1))
    crop = image[top : top + CROP, left : left + CROP]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    out = (crop.astype(np.float32) / 255.0 - MEAN) / STD
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def collate(items: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(items))


def _graph(method: str):
    import torchdata.nodes as tn
    from torch.utils.data import SequentialSampler

    paths = jpeg_paths() * EPOCH_REPEATS
    node = tn.SamplerWrapper(SequentialSampler(paths))
    node = tn.Mapper(node, _PathOf(paths))
    node = tn.Mapper(node, read_bytes)
    node = tn.ParallelMapper(node, map_fn=decode, num_workers=2, method=method)
    node = tn.ParallelMapper(node, map_fn=augment, num_workers=2, method=method)
    node = tn.Batcher(node, batch_size=BATCH, drop_last=True)
    node = tn.Mapper(node, collate)
    node = tn.Prefetcher(node, prefetch_factor=2)
    return tn.Loader(node)


class _PathOf:
    """Index -> file path (a picklable callable, as a process mapper needs)."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __call__(self, index: int) -> str:
        return self.paths[index]


def nodes_jpeg_threads():
    return _graph("thread")


def nodes_jpeg_processes():
    return _graph("process")


class JpegPool:
    """Reads, decodes and augments files in a thread pool; batches them in the main thread."""

    def __init__(self, threads: int = 2) -> None:
        self.paths = jpeg_paths() * EPOCH_REPEATS
        self.threads = threads
        self.batch_size = BATCH

    def read_bytes(self, path: str) -> bytes:
        return read_bytes(path)

    def decode(self, data: bytes) -> np.ndarray:
        return decode(data)

    def augment(self, image: np.ndarray) -> np.ndarray:
        return augment(image)

    def prepare(self, path: str) -> np.ndarray:
        return self.augment(self.decode(self.read_bytes(path)))

    def collate(self, items: list[np.ndarray]) -> torch.Tensor:
        return collate(items)

    def __iter__(self):
        with ThreadPoolExecutor(self.threads) as pool:
            chunk: list[np.ndarray] = []
            for item in pool.map(self.prepare, self.paths):
                chunk.append(item)
                if len(chunk) == self.batch_size:
                    yield self.collate(chunk)
                    chunk = []


class MpireJpeg(JpegPool):
    """The same stages mapped by mpire's ``WorkerPool`` with threads."""

    def __iter__(self):
        from mpire import WorkerPool

        with WorkerPool(n_jobs=self.threads, start_method="threading") as pool:
            chunk: list[np.ndarray] = []
            for item in pool.imap(self.prepare, self.paths):
                chunk.append(item)
                if len(chunk) == self.batch_size:
                    yield self.collate(chunk)
                    chunk = []


def pool_jpeg() -> JpegPool:
    return JpegPool()


def mpire_jpeg() -> MpireJpeg:
    return MpireJpeg()
