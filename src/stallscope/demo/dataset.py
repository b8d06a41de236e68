"""The built-in demo (SPEC §6): a photo-like JPEG image folder and a realistic pipeline.

``stallscope doctor`` with no target measures :func:`pipeline`. The images are
generated procedurally (seeded NumPy + Pillow: sky and ground gradients, hills,
multi-octave texture, trees, buildings, dunes, mountains, sensor noise and a
vignette), so nothing is downloaded and every machine builds the same bytes.
They are built once and cached under ``$STALLSCOPE_CACHE/demo-v1`` (default
``~/.cache/stallscope/demo-v1``).

NOTE [demo cache]
A build writes into a private ``demo-v1.building-<pid>`` folder, writes the
``COMPLETE`` marker last, then renames the folder into place. A build that is
interrupted therefore never leaves a folder that looks finished: without the
marker (or with a marker from another generator version) the folder is built
again. Two processes building at once each build privately; the first rename
wins and the other discards its copy.

The dataset reads each file, decodes it with Pillow and applies our own
torchvision-style transforms (no torchvision): RandomResizedCrop,
RandomHorizontalFlip, ColorJitter, ToTensor, Normalize, composed by
:class:`Compose`, whose ``.transforms`` list ``stallscope stages`` times one by
one. Random draws use Python's ``random`` module, which DataLoader reseeds in
every worker, so workers never repeat each other's augmentations.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageEnhance, ImageFilter

# Bump when the generator changes: a cache built by another version is rebuilt.
DEMO_VERSION = 1
DEMO_SEED = 20240611
GENERATOR = 2  # revision of the image generator: a cache from another revision is rebuilt
CLASSES = ("beach", "city", "desert", "forest", "mountains")
IMAGES_PER_CLASS = 40
SIZE_RANGE = (320, 500)  # pixels, each side
CROP_SIZE = 224
BATCH_SIZE = 32
MARKER = "COMPLETE"

# ImageNet channel statistics, as most vision pipelines normalise with them.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# -- cache location and build ---------------------------------------------------


def cache_root() -> Path:
    """Folder that holds stallscope's caches: ``$STALLSCOPE_CACHE`` or ``~/.cache/stallscope``."""
    env = os.environ.get("STALLSCOPE_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "stallscope"


def demo_dir(root: str | Path | None = None) -> Path:
    return (Path(root) if root is not None else cache_root()) / f"demo-v{DEMO_VERSION}"


@dataclass
class DemoBuild:
    """Where the demo images are, and whether this call had to generate them."""

    path: Path
    images: int
    classes: list[str]
    built: bool
    seconds: float
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def _expected_marker(images_per_class: int) -> dict[str, Any]:
    return {
        "version": DEMO_VERSION,
        "seed": DEMO_SEED,
        "classes": list(CLASSES),
        "images_per_class": images_per_class,
        "generator": GENERATOR,
    }


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def is_complete(folder: Path, images_per_class: int | None = None) -> bool:
    """True when ``folder`` holds a finished build of this generator version."""
    marker = _read_marker(folder)
    if marker is None:
        return False
    expected = _expected_marker(images_per_class or IMAGES_PER_CLASS)
    return all(marker.get(key) == value for key, value in expected.items())


def build_demo_dataset(
    root: str | Path | None = None,
    *,
    force: bool = False,
    images_per_class: int | None = None,
) -> DemoBuild:
    """Generate the demo image folder once; later calls find the marker and return at once.

    ``root`` defaults to :func:`cache_root`; ``images_per_class`` to ``IMAGES_PER_CLASS``
    (tests build smaller sets). See NOTE [demo cache].
    """
    count = images_per_class or IMAGES_PER_CLASS
    final = demo_dir(root)
    start = time.perf_counter()
    if is_complete(final, count) and not force:
        return _summary(final, built=False, seconds=time.perf_counter() - start)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(final)
    staging = final.with_name(f"{final.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _generate_into(staging, count)
        (staging / MARKER).write_text(
            json.dumps({**_expected_marker(count), "built_at": time.time()})
        )
        _move_into_place(staging, final, count, force=force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _summary(final, built=True, seconds=time.perf_counter() - start)


def _remove_abandoned_builds(final: Path) -> None:
    """Delete staging folders of builds whose process no longer exists (interrupted)."""
    for folder in final.parent.glob(f"{final.name}.building-*"):
        pid_text = folder.name.rsplit("-", 1)[-1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _move_into_place(staging: Path, final: Path, count: int, *, force: bool) -> None:
    if final.exists() and (force or not is_complete(final, count)):
        # An unfinished or outdated folder: replace it.
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.rename(staging, final)
    except OSError:
        if not is_complete(final, count):
            raise
        # Another process finished first; its copy is identical (same seed).


def _summary(folder: Path, *, built: bool, seconds: float) -> DemoBuild:
    files = sorted(folder.glob("*/*.jpg"))
    return DemoBuild(
        path=folder,
        images=len(files),
        classes=sorted(p.name for p in folder.iterdir() if p.is_dir()),
        built=built,
        seconds=seconds,
        bytes=sum(f.stat().st_size for f in files),
    )


def _generate_into(folder: Path, images_per_class: int) -> None:
    for class_index, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for number in range(images_per_class):
            rng = np.random.default_rng([DEMO_SEED, class_index, number])
            image = render_scene(name, rng)
            quality = int(rng.integers(82, 95))
            image.save(folder / name / f"{name}_{number:03d}.jpg", format="JPEG", quality=quality)


# -- procedural photographs -------------------------------------------------------


def render_scene(kind: str, rng: np.random.Generator) -> Image.Image:
    """One photo-like RGB image of scene ``kind``, fully determined by ``rng``.

    The scene is painted at half resolution and upscaled (bicubic), which softens
    edges the way a lens does and keeps a full build to a few seconds; sensor grain
    is added at full resolution.
    """
    width = int(rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1))
    height = int(rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1))
    small_w, small_h = width // 2, height // 2
    palette = _PALETTES[kind]
    horizon = _horizon_profile(kind, small_w, small_h, rng)
    pixels = _sky(palette, small_w, small_h, horizon, rng)
    ground = _ground(palette, small_w, small_h, horizon, rng)
    rows = np.arange(small_h, dtype=np.float32)[:, None]
    pixels = np.where((rows >= horizon[None, :])[..., None], ground, pixels)
    pixels *= _lens(small_w, small_h, rng)
    small = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    _SCENE_DETAILS[kind](ImageDraw.Draw(small), small_w, small_h, horizon, rng)
    small = small.filter(ImageFilter.SMOOTH)  # anti-alias the drawn edges before upscaling
    image = small.resize((width, height), Image.Resampling.BICUBIC)
    return _sensor_noise(image, rng)


def _jitter(color: Sequence[float], rng: np.random.Generator, spread: float = 18.0) -> np.ndarray:
    return np.clip(np.asarray(color, dtype=np.float32) + rng.normal(0.0, spread, 3), 0, 255)


def _fractal_noise(size: int, rng: np.random.Generator, octaves: Sequence[int]) -> np.ndarray:
    """Smooth multi-octave noise in about [-1, 1] over a square: coarse shapes plus fine grain."""
    total = np.zeros((size, size), dtype=np.float32)
    weight_sum = 0.0
    for level, cells in enumerate(octaves):
        grid = rng.standard_normal((cells + 1, cells + 1)).astype(np.float32)
        layer = Image.fromarray(grid, "F").resize((size, size), Image.Resampling.BICUBIC)
        weight = 0.6**level
        total += weight * np.asarray(layer, dtype=np.float32)
        weight_sum += weight
    return total / weight_sum


# Textures are generated once per process as big seeded tiles; each image takes a
# random window (and flip) of them, which costs a copy instead of nine resizes.
_TEXTURE_SIZE = 512  # twice the half-resolution canvas, so windows differ
_TEXTURE_OCTAVES = {"clouds": (4, 10, 22, 46), "ground": (6, 14, 30, 62, 126)}
_textures: dict[str, np.ndarray] = {}


def _texture(name: str, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    tile = _textures.get(name)
    if tile is None:
        seed = list(_TEXTURE_OCTAVES).index(name)
        tile = _textures[name] = _fractal_noise(
            _TEXTURE_SIZE, np.random.default_rng([DEMO_SEED, 1000 + seed]), _TEXTURE_OCTAVES[name]
        )
    top = int(rng.integers(0, _TEXTURE_SIZE - height + 1))
    left = int(rng.integers(0, _TEXTURE_SIZE - width + 1))
    window = tile[top : top + height, left : left + width]
    return window[:, ::-1] if rng.random() < 0.5 else window


def _horizon_profile(kind: str, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Row of the horizon for every column: a base line plus a few sine-wave hills."""
    base = rng.uniform(0.38, 0.62) * height
    amplitude = {"mountains": 0.16, "desert": 0.05, "forest": 0.04, "beach": 0.0, "city": 0.01}[
        kind
    ] * height
    cols = np.arange(width, dtype=np.float32)
    profile = np.full(width, base, dtype=np.float32)
    for _ in range(3):
        period = rng.uniform(0.3, 1.4) * width
        profile += (
            amplitude
            * rng.uniform(0.3, 1.0)
            * np.sin(2 * math.pi * cols / period + rng.uniform(0, 2 * math.pi))
        )
    return np.clip(profile, 0.15 * height, 0.85 * height)


def _sky(
    palette: dict[str, Any], width: int, height: int, horizon: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    top = _jitter(palette["sky_top"], rng)
    low = _jitter(palette["sky_low"], rng)
    rows = np.arange(height, dtype=np.float32)[:, None]
    t = np.clip(rows / max(1.0, float(horizon.mean())), 0.0, 1.0)[..., None]
    sky = top * (1 - t) + low * t
    sky = np.broadcast_to(sky, (height, width, 3)).copy()
    clouds = np.clip(_texture("clouds", width, height, rng) * 1.6 - rng.uniform(0.1, 0.9), 0.0, 1.0)
    sky += (255.0 - sky) * clouds[..., None] * palette["clouds"]
    return sky


def _ground(
    palette: dict[str, Any], width: int, height: int, horizon: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    near = _jitter(palette["ground_near"], rng)
    far = _jitter(palette["ground_far"], rng)
    rows = np.arange(height, dtype=np.float32)[:, None]
    depth = np.clip(
        (rows - horizon[None, :]) / np.maximum(1.0, height - horizon[None, :]), 0.0, 1.0
    )[..., None]
    ground = far * (1 - depth) + near * depth
    texture = _texture("ground", width, height, rng)
    ground = ground * (1.0 + palette["texture"] * texture[..., None])
    return ground


def _details_beach(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    horizon: np.ndarray,
    rng: np.random.Generator,
) -> None:
    line = float(horizon.mean())
    shore = line + rng.uniform(0.15, 0.35) * (height - line)
    sea = tuple(int(v) for v in _jitter((40, 95, 150), rng))
    points = (
        [(0, line)]
        + [(x, shore + 6 * math.sin(x / 17.0)) for x in range(0, width + 8, 8)]
        + [(width, line)]
    )
    draw.polygon(points, fill=sea)
    for _ in range(int(rng.integers(8, 20))):  # wave crests
        y = rng.uniform(line + 2, shore)
        x = rng.uniform(0, width)
        draw.line([(x, y), (x + rng.uniform(10, 50), y)], fill=(225, 235, 240), width=1)
    _sun(draw, width, line, rng)


def _details_city(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    horizon: np.ndarray,
    rng: np.random.Generator,
) -> None:
    line = float(horizon.mean())
    x = -rng.uniform(0, 30)
    while x < width:
        w = rng.uniform(0.08, 0.2) * width
        top = line - rng.uniform(0.1, 0.45) * height
        shade = int(rng.integers(60, 170))
        tint = tuple(int(np.clip(shade + d, 0, 255)) for d in rng.normal(0, 10, 3))
        draw.rectangle([x, top, x + w, line + 4], fill=tint)
        lit = (230, 210, 140) if rng.random() < 0.5 else (40, 50, 70)
        for wy in np.arange(top + 6, line - 6, 11):
            for wx in np.arange(x + 4, x + w - 6, 9):
                if rng.random() < 0.7:
                    draw.rectangle([wx, wy, wx + 4, wy + 5], fill=lit)
        x += w + rng.uniform(0, 12)


def _details_desert(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    horizon: np.ndarray,
    rng: np.random.Generator,
) -> None:
    line = float(horizon.mean())
    for _ in range(int(rng.integers(2, 5))):  # dune ridges with shadowed faces
        base = rng.uniform(line + 10, height)
        amp = rng.uniform(6, 25)
        period = rng.uniform(80, 220)
        phase = rng.uniform(0, 6.3)
        ridge = [
            (x, base - amp * math.sin(x / period * 6.3 + phase)) for x in range(0, width + 6, 6)
        ]
        shade = tuple(int(v) for v in _jitter((170, 120, 70), rng, 10))
        draw.polygon(ridge + [(width, height), (0, height)], fill=shade)
        draw.line(ridge, fill=(235, 200, 140), width=2)
    _sun(draw, width, line, rng)


def _details_forest(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    horizon: np.ndarray,
    rng: np.random.Generator,
) -> None:
    for _ in range(int(rng.integers(18, 40))):
        x = rng.uniform(0, width)
        col = int(np.clip(x, 0, width - 1))
        base = horizon[col] + rng.uniform(0, 0.45) * (height - horizon[col])
        scale = 0.4 + 1.2 * (base - horizon[col]) / max(1.0, height - horizon[col])
        tall = rng.uniform(40, 90) * scale
        half = tall * rng.uniform(0.22, 0.35)
        green = tuple(int(v) for v in _jitter((35, 85, 40), rng, 12))
        draw.rectangle([x - 2 * scale, base - tall * 0.25, x + 2 * scale, base], fill=(70, 50, 30))
        draw.polygon(
            [(x, base - tall), (x - half, base - tall * 0.2), (x + half, base - tall * 0.2)],
            fill=green,
        )


def _details_mountains(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    horizon: np.ndarray,
    rng: np.random.Generator,
) -> None:
    for _ in range(int(rng.integers(2, 5))):
        peak_x = rng.uniform(0, width)
        col = int(np.clip(peak_x, 0, width - 1))
        peak_y = horizon[col] - rng.uniform(0.1, 0.3) * height
        spread = rng.uniform(0.25, 0.6) * width
        rock = tuple(int(v) for v in _jitter((105, 100, 110), rng, 12))
        # Down to the lowest point of the horizon under the slopes, so no sky shows beneath.
        lo, hi = int(max(0, peak_x - spread)), int(min(width, peak_x + spread)) + 1
        foot = float(horizon[lo:hi].max()) + 4
        draw.polygon(
            [(peak_x, peak_y), (peak_x - spread, foot), (peak_x + spread, foot)], fill=rock
        )
        cap = rng.uniform(0.18, 0.3)
        draw.polygon(
            [
                (peak_x, peak_y),
                (peak_x - spread * cap, peak_y + (foot - peak_y) * cap),
                (peak_x + spread * cap, peak_y + (foot - peak_y) * cap),
            ],
            fill=(240, 242, 248),
        )


def _sun(draw: ImageDraw.ImageDraw, width: int, line: float, rng: np.random.Generator) -> None:
    if rng.random() < 0.4:
        return
    r = rng.uniform(10, 28)
    cx, cy = rng.uniform(r, width - r), rng.uniform(r, max(r + 1, line * 0.6))
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 244, 214))


_SCENE_DETAILS: dict[str, Callable[..., None]] = {
    "beach": _details_beach,
    "city": _details_city,
    "desert": _details_desert,
    "forest": _details_forest,
    "mountains": _details_mountains,
}

_PALETTES: dict[str, dict[str, Any]] = {
    "beach": {
        "sky_top": (60, 120, 200),
        "sky_low": (175, 210, 235),
        "ground_near": (220, 200, 160),
        "ground_far": (205, 190, 150),
        "texture": 0.12,
        "clouds": 0.7,
    },
    "city": {
        "sky_top": (110, 130, 160),
        "sky_low": (200, 195, 190),
        "ground_near": (80, 80, 85),
        "ground_far": (110, 110, 115),
        "texture": 0.2,
        "clouds": 0.5,
    },
    "desert": {
        "sky_top": (70, 130, 210),
        "sky_low": (225, 215, 190),
        "ground_near": (215, 165, 100),
        "ground_far": (225, 185, 130),
        "texture": 0.15,
        "clouds": 0.2,
    },
    "forest": {
        "sky_top": (90, 140, 200),
        "sky_low": (190, 210, 220),
        "ground_near": (45, 95, 40),
        "ground_far": (70, 115, 60),
        "texture": 0.35,
        "clouds": 0.8,
    },
    "mountains": {
        "sky_top": (50, 100, 180),
        "sky_low": (180, 200, 225),
        "ground_near": (85, 110, 70),
        "ground_far": (120, 130, 110),
        "texture": 0.3,
        "clouds": 0.6,
    },
}


def _lens(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Vignetting and a slight white-balance cast, as a per-pixel RGB multiplier."""
    ys = (np.arange(height, dtype=np.float32) - height / 2) / (height / 2)
    xs = (np.arange(width, dtype=np.float32) - width / 2) / (width / 2)
    radius2 = ys[:, None] ** 2 + xs[None, :] ** 2
    vignette = 1.0 - np.float32(rng.uniform(0.1, 0.3)) * radius2 / 2.0
    cast = (1.0 + rng.normal(0, 0.03, 3)).astype(np.float32)
    return vignette[..., None] * cast


_GRAIN_SIZE = 640  # > SIZE_RANGE[1], so any image fits at a random offset
_grain: Image.Image | None = None


def _grain_tile() -> Image.Image:
    """Gaussian luminance noise around mid-grey (sigma 4), generated once per process."""
    global _grain
    if _grain is None:
        rng = np.random.default_rng([DEMO_SEED, 0xC0FFEE])
        noise = np.clip(128.0 + 4.0 * rng.standard_normal((_GRAIN_SIZE, _GRAIN_SIZE)), 0, 255)
        _grain = Image.fromarray(noise.astype(np.uint8), "L").convert("RGB")
    return _grain


def _sensor_noise(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """Luminance grain at full resolution, like a real sensor: a random window of the tile."""
    width, height = image.size
    left = int(rng.integers(0, _GRAIN_SIZE - width + 1))
    top = int(rng.integers(0, _GRAIN_SIZE - height + 1))
    grain = _grain_tile().crop((left, top, left + width, top + height))
    return ImageChops.add(image, grain, scale=1.0, offset=-128)


# -- the dataset --------------------------------------------------------------------


def load_image(path: str) -> Image.Image:
    """Read and decode one file the way torchvision's ``pil_loader`` does."""
    with open(path, "rb") as handle:
        image = Image.open(handle)
        return image.convert("RGB")


class DemoImageFolder:
    """An ImageFolder-like map-style dataset: ``root/<class>/<file>.jpg`` -> (tensor, label)."""

    def __init__(self, root: str | Path, transform: Callable[[Any], Any] | None = None) -> None:
        self.root = str(root)
        folder = Path(root)
        self.classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        self.samples = [
            (str(path), self.class_to_idx[name])
            for name in self.classes
            for path in sorted((folder / name).glob("*.jpg"))
        ]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        image = load_image(path)
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def __repr__(self) -> str:
        return f"DemoImageFolder({self.root!r}, {len(self)} images, {len(self.classes)} classes)"


# -- transforms (torchvision-style, Pillow + NumPy only) ------------------------------


class Compose:
    """Apply ``transforms`` in order; ``.transforms`` is the list stallscope times one by one."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


class RandomResizedCrop:
    """Crop a random area fraction and aspect ratio, then resize to ``size``×``size``."""

    def __init__(
        self,
        size: int,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.size = size
        self.scale = scale
        self.ratio = ratio

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        area = width * height
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(log_low, log_high))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                left = random.randint(0, width - w)
                top = random.randint(0, height - h)
                return left, top, left + w, top + h
        side = min(width, height)  # fallback: the central square
        left, top = (width - side) // 2, (height - side) // 2
        return left, top, left + side, top + side

    def __call__(self, image: Image.Image) -> Image.Image:
        box = self.box(*image.size)
        return image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale})"


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        if random.random() < self.p:
            return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class ColorJitter:
    """Random brightness, contrast, saturation (Pillow enhancers) and hue (HSV shift), in random order."""

    def __init__(
        self,
        brightness: float = 0.4,
        contrast: float = 0.4,
        saturation: float = 0.4,
        hue: float = 0.1,
    ) -> None:
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue

    def __call__(self, image: Image.Image) -> Image.Image:
        steps: list[Callable[[Image.Image], Image.Image]] = []
        if self.brightness:
            steps.append(
                lambda im: ImageEnhance.Brightness(im).enhance(self._factor(self.brightness))
            )
        if self.contrast:
            steps.append(lambda im: ImageEnhance.Contrast(im).enhance(self._factor(self.contrast)))
        if self.saturation:
            steps.append(lambda im: ImageEnhance.Color(im).enhance(self._factor(self.saturation)))
        if self.hue:
            steps.append(self._shift_hue)
        random.shuffle(steps)
        for step in steps:
            image = step(image)
        return image

    @staticmethod
    def _factor(amount: float) -> float:
        return random.uniform(max(0.0, 1 - amount), 1 + amount)

    def _shift_hue(self, image: Image.Image) -> Image.Image:
        shift = int(round(random.uniform(-self.hue, self.hue) * 255))
        hsv = np.array(image.convert("HSV"))
        hsv[..., 0] = (hsv[..., 0].astype(np.int16) + shift).astype(np.uint8)  # hue wraps around
        return Image.fromarray(hsv, "HSV").convert("RGB")

    def __repr__(self) -> str:
        return f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}, hue={self.hue})"


class ToTensor:
    """HWC uint8 image -> CHW float32 tensor in [0, 1]."""

    def __call__(self, image: Image.Image) -> Any:
        import torch

        array = np.asarray(image, dtype=np.uint8)
        return (
            torch.from_numpy(array.copy())
            .permute(2, 0, 1)
            .contiguous()
            .to(torch.float32)
            .div_(255.0)
        )

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """Per-channel ``(x - mean) / std`` on a CHW tensor."""

    def __init__(self, mean: Sequence[float] = MEAN, std: Sequence[float] = STD) -> None:
        self.mean = tuple(mean)
        self.std = tuple(std)

    def __call__(self, tensor: Any) -> Any:
        import torch

        mean = torch.tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def train_transforms(size: int = CROP_SIZE) -> Compose:
    """The augmentation pipeline of a typical ImageNet-style training run."""
    return Compose(
        [
            RandomResizedCrop(size),
            RandomHorizontalFlip(),
            # Brightness/contrast/saturation as in timm's default recipe; a hue shift
            # (HSV round trip) would double the per-sample cost.
            ColorJitter(0.4, 0.4, 0.4, hue=0.0),
            ToTensor(),
            Normalize(),
        ]
    )


# -- targets ---------------------------------------------------------------------------


def dataset(root: str | Path | None = None) -> DemoImageFolder:
    """The demo dataset with its training transforms, building the images if needed."""
    build = build_demo_dataset(root)
    return DemoImageFolder(build.path, transform=train_transforms())


def pipeline() -> dict[str, Any]:
    """TARGET ``stallscope.demo:pipeline``: the demo dataset and its batch size."""
    return {"dataset": dataset(), "batch_size": BATCH_SIZE}


# -- a small model for `stallscope profile stallscope.demo:pipeline_with_model` ----------


def _tiny_cnn() -> Any:
    import torch.nn as nn

    # Pooling first keeps a CPU step near 0.1 s for a batch of 32: lighter than loading
    # the batch on two cores, so the demo is input-bound as many real vision jobs are.
    return nn.Sequential(
        nn.AvgPool2d(4),
        nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, len(CLASSES)),
    )


def train_step(model: Any, batch: Any) -> float:
    """One SGD step of the tiny classifier; the optimiser is created on the model's device."""
    import torch.nn.functional as F
    from torch.optim import SGD

    optimizer = getattr(model, "demo_optimizer", None)
    if optimizer is None:
        optimizer = SGD(model.parameters(), lr=0.01, momentum=0.9)
        model.demo_optimizer = optimizer
    images, labels = batch
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def pipeline_with_model() -> dict[str, Any]:
    """TARGET ``stallscope.demo:pipeline_with_model``: the demo plus a tiny CNN and its train_step."""
    return {**pipeline(), "model": _tiny_cnn(), "train_step": train_step}
