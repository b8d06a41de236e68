"""Small photo-like JPEG files on disk for the inline-pipeline datasets (code-change tests).

Written once (seeded) into a cached folder (``_datadir.cached_dir``): 768×576, quality 90.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _datadir import cached_dir
from PIL import Image

WIDTH, HEIGHT = 768, 576
FILES = 48


def paint(index: int) -> np.ndarray:
    """Smooth colour gradients, a few discs and fine noise, seeded by ``index``."""
    rng = np.random.default_rng(2000 + index)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    image = np.empty((HEIGHT, WIDTH, 3), np.float32)
    for c in range(3):
        a, b = rng.uniform(0.002, 0.02, 2)
        image[..., c] = 128 + 90 * np.sin(a * x + b * y + rng.uniform(0, 6.28))
    for _ in range(6):
        cx, cy, r = rng.uniform(0, WIDTH), rng.uniform(0, HEIGHT), rng.uniform(20, 120)
        image[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 12, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _write(folder: Path) -> None:
    for i in range(FILES):
        Image.fromarray(paint(i)).save(folder / f"{i:04d}.jpg", "JPEG", quality=90)


def jpeg_folder() -> Path:
    return cached_dir(f"inline-jpegs-{WIDTH}x{HEIGHT}-{FILES}-v1", _write)


def jpeg_paths(count: int = FILES) -> list[Path]:
    return sorted(jpeg_folder().glob("*.jpg"))[:count]
