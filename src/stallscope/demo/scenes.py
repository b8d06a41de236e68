"""Procedural photographs for the demo: seeded NumPy + Pillow scenes (sky and ground gradients,
hills, multi-octave texture, trees, buildings, dunes, mountains, sensor noise and a vignette), so
nothing is downloaded and every machine builds the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

DEMO_SEED = 20240611
GENERATOR = 2  # revision of the image generator: a cache from another revision is rebuilt
CLASSES = ("beach", "city", "desert", "forest", "mountains")
SIZE_RANGE = (320, 500)  # pixels, each side

Rng = np.random.Generator
RGB = tuple[int, int, int]


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


def _colour(color: Sequence[float], rng: np.random.Generator, spread: float = 18.0) -> RGB:
    """``color`` jittered, as whole RGB values to draw with."""
    r, g, b = (int(v) for v in _jitter(color, rng, spread))
    return r, g, b


def _on_horizon(width: int, horizon: np.ndarray, rng: Rng) -> tuple[float, Any]:
    """A random x and the horizon's height there (the profile's own scalar type)."""
    x = rng.uniform(0, width)
    return x, horizon[int(np.clip(x, 0, width - 1))]


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


def _sky(palette: Palette, width: int, height: int, horizon: np.ndarray, rng: Rng) -> np.ndarray:
    top = _jitter(palette.sky_top, rng)
    low = _jitter(palette.sky_low, rng)
    rows = np.arange(height, dtype=np.float32)[:, None]
    t = np.clip(rows / max(1.0, float(horizon.mean())), 0.0, 1.0)[..., None]
    sky = top * (1 - t) + low * t
    sky = np.broadcast_to(sky, (height, width, 3)).copy()
    clouds = np.clip(_texture("clouds", width, height, rng) * 1.6 - rng.uniform(0.1, 0.9), 0.0, 1.0)
    sky += (255.0 - sky) * clouds[..., None] * palette.clouds
    return sky


def _ground(palette: Palette, width: int, height: int, horizon: np.ndarray, rng: Rng) -> np.ndarray:
    near = _jitter(palette.ground_near, rng)
    far = _jitter(palette.ground_far, rng)
    rows = np.arange(height, dtype=np.float32)[:, None]
    depth = np.clip(
        (rows - horizon[None, :]) / np.maximum(1.0, height - horizon[None, :]), 0.0, 1.0
    )[..., None]
    ground = far * (1 - depth) + near * depth
    texture = _texture("ground", width, height, rng)
    textured: np.ndarray = ground * (1.0 + palette.texture * texture[..., None])
    return textured


def _details_beach(
    draw: ImageDraw.ImageDraw, width: int, height: int, horizon: np.ndarray, rng: Rng
) -> None:
    line = float(horizon.mean())
    shore = line + rng.uniform(0.15, 0.35) * (height - line)
    sea = _colour((40, 95, 150), rng)
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
    draw: ImageDraw.ImageDraw, width: int, height: int, horizon: np.ndarray, rng: Rng
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
    draw: ImageDraw.ImageDraw, width: int, height: int, horizon: np.ndarray, rng: Rng
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
        shade = _colour((170, 120, 70), rng, 10)
        draw.polygon(ridge + [(width, height), (0, height)], fill=shade)
        draw.line(ridge, fill=(235, 200, 140), width=2)
    _sun(draw, width, line, rng)


def _details_forest(
    draw: ImageDraw.ImageDraw, width: int, height: int, horizon: np.ndarray, rng: Rng
) -> None:
    for _ in range(int(rng.integers(18, 40))):
        x, ground = _on_horizon(width, horizon, rng)
        base = ground + rng.uniform(0, 0.45) * (height - ground)
        scale = 0.4 + 1.2 * (base - ground) / max(1.0, height - ground)
        tall = rng.uniform(40, 90) * scale
        half = tall * rng.uniform(0.22, 0.35)
        green = _colour((35, 85, 40), rng, 12)
        draw.rectangle([x - 2 * scale, base - tall * 0.25, x + 2 * scale, base], fill=(70, 50, 30))
        draw.polygon(
            [(x, base - tall), (x - half, base - tall * 0.2), (x + half, base - tall * 0.2)],
            fill=green,
        )


def _details_mountains(
    draw: ImageDraw.ImageDraw, width: int, height: int, horizon: np.ndarray, rng: Rng
) -> None:
    for _ in range(int(rng.integers(2, 5))):
        peak_x, ground = _on_horizon(width, horizon, rng)
        peak_y = ground - rng.uniform(0.1, 0.3) * height
        spread = rng.uniform(0.25, 0.6) * width
        rock = _colour((105, 100, 110), rng, 12)
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


class Palette(NamedTuple):
    """A scene's colours and strengths."""

    sky_top: RGB
    sky_low: RGB  # near the horizon
    ground_near: RGB
    ground_far: RGB
    texture: float
    clouds: float


# One row per scene, in Palette's order.
_PALETTES: dict[str, Palette] = {
    "beach": Palette((60, 120, 200), (175, 210, 235), (220, 200, 160), (205, 190, 150), 0.12, 0.7),
    "city": Palette((110, 130, 160), (200, 195, 190), (80, 80, 85), (110, 110, 115), 0.2, 0.5),
    "desert": Palette((70, 130, 210), (225, 215, 190), (215, 165, 100), (225, 185, 130), 0.15, 0.2),
    "forest": Palette((90, 140, 200), (190, 210, 220), (45, 95, 40), (70, 115, 60), 0.35, 0.8),
    "mountains": Palette((50, 100, 180), (180, 200, 225), (85, 110, 70), (120, 130, 110), 0.3, 0.6),
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
