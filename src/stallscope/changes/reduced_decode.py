"""Reduced-size decode: Pillow's ``Image.draft`` (OpenCV's ``IMREAD_REDUCED_COLOR_*``) decodes a
JPEG at 1/2, 1/4 or 1/8 of its size, much faster, where the first geometric transform shrinks the
image by 2× or more anyway. It alters what the model sees a little; the side effect is the PSNR of
the same crops, resized to the transform's output size, against the full decode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..pipeline.transforms import get_path, replace_transforms
from .anatomy import Anatomy, Recorder, array_of, seeded
from .base import Applied, Change, Patch, patched_class, run_two_batches, verified_patch
from .prefix_cache import fresh_instance
from .source import is_statement, source_file
from .wrappers import ReducedDecodeDataset, reduced_decode

FACTORS = (8, 4, 2)
CROPS = 6  # per sample, the full frame among them


def height_width(value: Any) -> tuple[int, int] | None:
    if hasattr(value, "getbands") and hasattr(value, "size"):
        return value.size[1], value.size[0]
    if isinstance(value, np.ndarray) and value.ndim >= 2:
        return value.shape[0], value.shape[1]
    if hasattr(value, "shape") and len(value.shape) >= 2:
        return int(value.shape[-2]), int(value.shape[-1])
    return None


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def draft_words(factor: int) -> str:
    """How to decode a JPEG at 1/``factor`` size, in words (the sentence, without its end)."""
    return (
        'Right after Image.open(...), call image.draft("RGB", (image.width // '
        f"{factor}, image.height // {factor})) "
        f"(OpenCV: cv2.imread(path, cv2.IMREAD_REDUCED_COLOR_{factor})), so JPEGs "
        f"decode at 1/{factor} size"
    )


def psnr_effect(
    factor: int, values: list[float], counted: str, summary: Callable[[float, float], str]
) -> dict[str, Any]:
    """A reduced decode's side effect: the PSNR against the full decode over ``values`` (one per
    ``counted``: crops, images), the mean and the worst, and ``summary(mean, worst)``."""
    finite = [v for v in values if math.isfinite(v)] or [99.0]
    mean, worst = float(np.mean(finite)), float(min(finite))
    return {
        "summary": summary(mean, worst),
        "alters_output": True,
        "factor": factor,
        "psnr_db": round(mean, 2),
        "psnr_worst_db": round(worst, 2),
        counted: len(values),
    }


OPENED = re.compile(r"^(\s*)(\w+)\s*=\s*(?:PIL\.)?Image\.open\(.*\)\s*(#.*)?$")
IMREAD = re.compile(r"^(.*cv2\.im(?:read|decode)\()([^,()]+(?:\([^()]*\))?)(\).*)$")


def reduced_decode_text(lines: list[str], f: int) -> tuple[str, int]:
    """The source with a draft call after each ``x = Image.open(...)`` line and
    ``cv2.IMREAD_REDUCED_COLOR_f`` in each one-argument ``cv2.imread``/``imdecode`` call; the text
    and how many lines changed."""
    new: list[str] = []
    changed = 0
    for line in lines:
        new.append(line)
        m = OPENED.match(line.rstrip("\n"))
        if m and is_statement(line):
            new.append(
                f'{m.group(1)}{m.group(2)}.draft("RGB", ({m.group(2)}.width // '
                f"{f}, {m.group(2)}.height // {f}))"
                f"  # decode JPEGs at 1/{f} size\n"
            )
            changed += 1
            continue
        m = IMREAD.match(line.rstrip("\n"))
        if m and "IMREAD" not in line:
            new[-1] = f"{m.group(1)}{m.group(2)}, cv2.IMREAD_REDUCED_COLOR_{f}{m.group(3)}\n"
            changed += 1
    return "".join(new), changed


class ReducedDecode(Change):
    id = "reduced-decode"
    title = "Reduced-size decode"

    def applies(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        geometric = None
        for j in range(len(anatomy.stages)):
            before = anatomy.samples[0].input_to(j)
            if height_width(before) != height_width(anatomy.samples[0].outputs[j]):
                geometric = j
                break
        if geometric is None or height_width(anatomy.samples[0].input) is None:
            return "no transform changes the image size"
        factor, shrink = 8, math.inf
        for sample in anatomy.samples:
            big = height_width(sample.input_to(geometric))
            out = height_width(sample.outputs[geometric])
            if big is None or out is None:
                return (
                    "the image size could not be read before and after the first geometric "
                    "transform"
                )
            shrink = min(shrink, min(big) / max(out))
            factor = min(factor, next((f for f in FACTORS if min(big) / f >= max(out)), 1))
        name = anatomy.names[geometric]
        if factor < 2:
            return (
                f"the first geometric transform, {name}, shrinks the image by "
                f"{shrink:.1f}×, less than 2×"
            )
        calls: list[int] = []
        reduced = self._inputs(anatomy, factor, calls)
        if not calls:
            return "no JPEG is decoded through PIL.Image.open or cv2.imread/imdecode in __getitem__"
        if height_width(reduced[0]) == height_width(anatomy.samples[0].input):
            return "decoding at reduced size did not change the decoded image's size"
        self.factor, self.geometric, self.reduced, self.shrink = factor, geometric, reduced, shrink
        return None

    @staticmethod
    def _inputs(anatomy: Anatomy, factor: int, calls: list[int] | None = None) -> list[Any]:
        recorder = Recorder(anatomy.compose)
        probe = anatomy.with_compose(recorder)
        for sample in anatomy.samples:
            with reduced_decode(factor, calls), seeded(0):
                probe[sample.index]
        return recorder.inputs

    def apply(self, anatomy: Anatomy, pipeline: Any) -> Applied:
        return Applied(ReducedDecodeDataset(anatomy.dataset, self.factor))

    def side_effect(self, anatomy: Anatomy, pipeline: Any, applied: Applied) -> dict[str, Any]:
        from PIL import Image

        out_h, out_w = height_width(anatomy.samples[0].outputs[self.geometric]) or (224, 224)
        rng = np.random.default_rng(0)
        values = []
        for sample, small in zip(anatomy.samples, self.reduced):
            full = (
                sample.input
                if hasattr(sample.input, "resize")
                else Image.fromarray(array_of(sample.input))
            )
            small = small if hasattr(small, "resize") else Image.fromarray(array_of(small))
            for c in range(CROPS):
                if c == 0:
                    box = (0.0, 0.0, 1.0, 1.0)
                else:  # a random relative box of 25-100 % of the area
                    side = math.sqrt(rng.uniform(0.25, 1.0))
                    left, top = rng.uniform(0, 1 - side, 2)
                    box = (left, top, left + side, top + side)
                crops = [
                    im.resize(
                        (out_w, out_h),
                        Image.Resampling.BILINEAR,
                        box=(
                            box[0] * im.width,
                            box[1] * im.height,
                            box[2] * im.width,
                            box[3] * im.height,
                        ),
                    )
                    for im in (full, small)
                ]
                values.append(
                    psnr(np.asarray(crops[0].convert("RGB")), np.asarray(crops[1].convert("RGB")))
                )
        full_hw = height_width(anatomy.samples[0].input) or (0, 0)
        small_hw = height_width(self.reduced[0]) or (0, 0)
        return psnr_effect(
            self.factor,
            values,
            "crops",
            lambda mean, worst: (
                f"alters what the model sees: JPEGs are decoded at 1/{self.factor} size "
                f"({full_hw[1]}×{full_hw[0]} → {small_hw[1]}×{small_hw[0]}) before "
                f"{anatomy.names[self.geometric]} shrinks them to {out_w}×{out_h}; the "
                "same crops differ "
                f"from full decode by PSNR {mean:.1f} dB on average (worst {worst:.1f} "
                f"dB, {len(values)} crops)"
            ),
        )

    def patch(self, anatomy: Anatomy, pipeline: Any) -> Patch:
        f = self.factor
        owner_path = anatomy.compose_path[:-1]
        owner = get_path(anatomy.dataset, owner_path)
        words = draft_words(f) + "."
        source = source_file(type(owner))
        if source is None:
            return Patch(None, words, False, "the dataset's source file could not be read")
        text, changed = reduced_decode_text(source.lines, f)
        if not changed:
            return Patch(
                None,
                words,
                False,
                f"no `x = Image.open(...)` or cv2.imread line in {source.path.name}",
            )

        def verify(module: Any) -> str | None:
            patched = patched_class(module, type(owner).__name__)

            def build() -> Any:
                clone = fresh_instance(owner, patched)
                return (
                    replace_transforms(anatomy.dataset, {owner_path: clone})
                    if owner_path
                    else clone
                )

            why = run_two_batches(lambda: (build(), None), anatomy, pipeline, tolerance=None)
            if why:
                return why
            recorder = Recorder(anatomy.compose)
            with seeded(0):
                replace_transforms(build(), {anatomy.compose_path: recorder})[
                    anatomy.samples[0].index
                ]
            if height_width(recorder.inputs[0]) == height_width(anatomy.samples[0].input):
                return "the patched code still decodes at full size"
            return None

        return verified_patch(source, text, words, verify)
