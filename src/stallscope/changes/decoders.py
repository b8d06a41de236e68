"""A faster JPEG decoder, measured on the user's own files (NOTE [inline prefix] finds the
decode).

The files the dataset decodes are caught at the decode call (``Image.open``, ``cv2.imread``,
``cv2.imdecode``) while a few items are fetched. Every decoder this machine has (Pillow, OpenCV's
``imdecode``, ``simplejpeg`` and ``torchvision.io.decode_jpeg`` where they import; Pillow's
``draft`` and OpenCV's ``IMREAD_REDUCED_COLOR_*`` at the reduced-size decode's factor where a
resize follows) decodes the same bytes, one thread, in interleaved rounds (the fastest round
counts); each one's pixels are compared with the user's decoder's (PSNR; reduced sizes after both
are resized to the resize's output). Where decoding is a large share of an item and another
full-size decoder is faster, the change swaps it in: inside the probe the decode call is patched
while an item is fetched (``DecoderSwapDataset``), and the diff rewrites the decode line.
"""

from __future__ import annotations

import io
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .anatomy import replaced
from .base import Applied, Change, Patch, batches, fastest_seconds, patched_class, verified_patch
from .inline import InlineAnatomy
from .inline_changes import (
    InlineReducedDecode,
    check_batches_structure,
    resized,
)
from .prefix_cache import fresh_instance
from .reduced_decode import psnr
from .source import is_statement

FILES = 8  # the user's files decoded by every decoder
ROUNDS = 6  # interleaved timing rounds; each decoder's fastest counts
MIN_SHARE = 0.25  # decoding must be at least this share of an item
MIN_GAIN = 1.05  # the faster decoder must save at least 5 % of the decode
MIN_PSNR_DB = 40.0  # and give nearly the same pixels

# JPEG bytes → what the user's decode call returns: "pil", a loaded RGB image (``Image.open``), or
# "bgr", a BGR array (``cv2.imread``); each decoder is timed producing that, conversions included.
Decoder = Callable[[bytes, str], Any]


def _from_rgb(rgb: np.ndarray, target: str) -> Any:
    if target == "pil":
        from PIL import Image

        return Image.fromarray(rgb)
    import cv2

    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)


def pil_decode(data: bytes, target: str, factor: int = 1) -> Any:
    from PIL import Image

    image: Any = Image.open(io.BytesIO(data))
    if factor > 1:
        image.draft("RGB", (image.width // factor, image.height // factor))
    image.load()
    if image.mode != "RGB":
        image = image.convert("RGB")
    return image if target == "pil" else _from_rgb(np.asarray(image), target)


def cv2_decode(data: bytes, target: str, factor: int = 1) -> Any:
    import cv2

    flag = cv2.IMREAD_COLOR if factor == 1 else getattr(cv2, f"IMREAD_REDUCED_COLOR_{factor}")
    bgr: Any = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if target == "bgr":
        return bgr
    from PIL import Image

    return Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


_LIBRARIES: dict[str, dict[str, Decoder]] = {}  # per process: a failed import is tried once


def available_decoders(factor: int | None) -> dict[str, Decoder]:
    """Name → decoder, for every library that imports here (torchvision's import may raise
    anything, not only ImportError)."""
    if "found" not in _LIBRARIES:
        _LIBRARIES["found"] = _importable()
    found = dict(_LIBRARIES["found"])
    if factor:
        found[f"PIL + draft 1/{factor}"] = lambda data, target: pil_decode(data, target, factor)
        if "OpenCV imdecode" in found:
            found[f"OpenCV IMREAD_REDUCED_COLOR_{factor}"] = lambda data, target: cv2_decode(
                data, target, factor
            )
    return found


def _importable() -> dict[str, Decoder]:
    found: dict[str, Decoder] = {"PIL": pil_decode}
    try:
        import cv2  # noqa: F401

        found["OpenCV imdecode"] = cv2_decode
    except Exception:
        pass
    try:
        import simplejpeg

        def sj(data: bytes, target: str) -> Any:
            if target == "bgr":
                return simplejpeg.decode_jpeg(data, colorspace="BGR")
            return _from_rgb(simplejpeg.decode_jpeg(data, colorspace="RGB"), target)

        found["simplejpeg"] = sj
    except Exception:
        pass
    try:
        import torch
        from torchvision.io import decode_jpeg

        def tv(data: bytes, target: str) -> Any:
            tensor = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            return _from_rgb(np.ascontiguousarray(tensor.permute(1, 2, 0).numpy()), target)

        found["torchvision decode_jpeg"] = tv
    except Exception:
        pass
    return found


def _bytes_of(source: Any) -> bytes | None:
    if isinstance(source, (str, Path)):
        try:
            return Path(source).read_bytes()
        except OSError:
            return None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, np.ndarray) and source.dtype == np.uint8:
        return source.tobytes()
    if hasattr(source, "getvalue"):
        return bytes(source.getvalue())
    return None


@contextmanager
def caught_decodes(seen: list[tuple[str, Any]]) -> Iterator[None]:
    """Inside: each ``Image.open``/``cv2.imread``/``cv2.imdecode`` call appends (which, its first
    argument) to ``seen``."""
    wrappers: list[tuple[Any, str, Any]] = []
    pil = sys.modules.get("PIL.Image")
    targets: list[tuple[Any, str, str]] = []
    if pil is not None:
        targets.append((pil, "open", "PIL"))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        targets += [(cv2, "imread", "cv2.imread"), (cv2, "imdecode", "cv2.imdecode")]
    for owner, name, label in targets:
        original = getattr(owner, name)

        def wrapper(*args: Any, _original: Any = original, _label: str = label, **kw: Any) -> Any:
            if args:
                seen.append((_label, args[0]))
            return _original(*args, **kw)

        wrappers.append((owner, name, wrapper))
    with replaced(wrappers):
        yield


class DecoderSwapDataset:
    """The user's items with their JPEG decode call answered by another decoder (while an item is
    fetched): ``Image.open`` returns a loaded RGB image decoded by it, ``cv2.imread``/``imdecode``
    a BGR array."""

    def __init__(self, dataset: Any, decoder: str, factor: int | None) -> None:
        self.dataset = dataset
        self.decoder = decoder
        self.factor = factor
        self._decode: Decoder | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if self._decode is None:
            self._decode = available_decoders(self.factor)[self.decoder]
        with swapped_decode(self._decode):
            return self.dataset[index]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_decode"] = None  # a lambda: each worker looks it up again
        return state


@contextmanager
def swapped_decode(decode: Decoder) -> Iterator[None]:
    wrappers: list[tuple[Any, str, Any]] = []
    inside: list[bool] = []  # the other decoder may call the patched functions itself

    def decoded(data: bytes, target: str) -> Any:
        inside.append(True)
        try:
            return decode(data, target)
        finally:
            inside.pop()

    pil: Any = sys.modules.get("PIL.Image")
    if pil is not None:
        original_open = pil.open

        def open_with(source: Any, *args: Any, **kw: Any) -> Any:
            data = None if inside else _bytes_of(source)
            if data is not None and data[:2] == b"\xff\xd8":
                return decoded(data, "pil")
            return original_open(source, *args, **kw)

        wrappers.append((pil, "open", open_with))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        for name in ("imread", "imdecode"):
            original = getattr(cv2, name)

            def swapped(source: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
                flags = kw.get("flags", args[0] if args else cv2.IMREAD_COLOR)
                data = None if inside else _bytes_of(source)
                if flags == cv2.IMREAD_COLOR and data is not None and data[:2] == b"\xff\xd8":
                    return decoded(data, "bgr")
                return _original(source, *args, **kw)

            wrappers.append((cv2, name, swapped))
    with replaced(wrappers):
        yield


PIL_OPEN = re.compile(
    r"^(\s*)(\w+)\s*=\s*(?:PIL\.)?Image\.open\(([^()]*(?:\([^()]*\))?)\)\s*(#.*)?$"
)
CV2_READ = re.compile(r"^(.*)cv2\.imread\(([^,()]+(?:\([^()]*\))?)\)(.*)$")


class FasterDecode(Change):
    id = "faster-decode"
    title = "A faster JPEG decoder"

    def applies(self, anatomy: InlineAnatomy, pipeline: Any) -> str | None:
        seen: list[tuple[str, Any]] = []
        with caught_decodes(seen):
            for index in range(min(FILES, len(anatomy.dataset))):
                anatomy.dataset[index]
        if not seen:
            return "no image is decoded through Image.open, cv2.imread or cv2.imdecode"
        users = {which for which, _ in seen}
        self.user = "PIL" if users == {"PIL"} else "OpenCV imdecode"
        self.call = next(iter(users)) if len(users) == 1 else None
        files = [b for b in (_bytes_of(s) for _, s in seen) if b and b[:2] == b"\xff\xd8"]
        self.paths = all(isinstance(s, (str, Path)) for _, s in seen)
        if not files:
            return "the images decoded are not JPEG files stallscope can read"
        reduce = InlineReducedDecode()
        self.factor = reduce.factor if reduce.applies(anatomy, pipeline) is None else None
        out = reduce.out_size if self.factor else None
        decoders = available_decoders(self.factor)
        if self.user not in decoders:
            return f"{self.user} is the decoder in use but does not import here"
        target = "pil" if self.user == "PIL" else "bgr"
        reference = [np.asarray(decoders[self.user](b, target)) for b in files]
        psnrs: dict[str, float] = {}
        for name, decode in decoders.items():
            try:
                values = []
                for data, ref in zip(files, reference):
                    got = np.asarray(decode(data, target))
                    if got.shape != ref.shape:
                        if out is None:
                            raise ValueError("another size")
                        values.append(
                            psnr(resized(ref, out[1], out[0]), resized(got, out[1], out[0]))
                        )
                    else:
                        values.append(psnr(ref, got))
            except Exception:  # a decoder that fails on these files is left out
                continue
            psnrs[name] = min(values)
        # Interleaved (A B … B A per round): drift and other jobs hit every decoder alike.
        quickest = dict.fromkeys(psnrs, math.inf)
        names = list(psnrs)
        for round_ in range(ROUNDS):
            for name in names if round_ % 2 == 0 else names[::-1]:
                decode = decoders[name]
                seconds = fastest_seconds(
                    lambda decode=decode: [decode(b, target) for b in files],  # type: ignore[misc]
                    repeats=1,
                    threads=1,
                )
                quickest[name] = min(quickest[name], seconds)
        table: list[dict[str, Any]] = [
            {
                "decoder": name,
                "ms_per_image": round(1000 * quickest[name] / len(files), 3),
                "psnr_db": round(psnrs[name], 2) if math.isfinite(psnrs[name]) else None,
                "reduced": "1/" in name or "REDUCED" in name,
            }
            for name in names
        ]
        self.table = sorted(table, key=lambda row: row["ms_per_image"])
        mine: dict[str, Any] = next(row for row in table if row["decoder"] == self.user)
        # The item was timed at another moment: a share above 1 is that moment's noise.
        share = float(mine["ms_per_image"]) / 1000 / max(anatomy.seconds_per_sample, 1e-9)
        self.share = min(1.0, share)
        self.files = len(files)
        listing = "; ".join(f"{row['decoder']} {row['ms_per_image']:.2f} ms" for row in self.table)
        if self.share < MIN_SHARE:
            return (
                f"decoding is {100 * self.share:.0f}% of an item ({self.user}, "
                f"{mine['ms_per_image']:.2f} ms per image), too small a share to gain from "
                f"another decoder ({listing})"
            )
        candidates = [
            row
            for row in self.table
            if not row["reduced"]
            and row["decoder"] != self.user
            and (row["psnr_db"] is None or row["psnr_db"] >= MIN_PSNR_DB)
        ]
        best = candidates[0] if candidates else None
        if best is None or best["ms_per_image"] * MIN_GAIN > mine["ms_per_image"]:
            return (
                f"{self.user}, the decoder in use, is the fastest full-size decoder on your "
                f"files within {100 * (MIN_GAIN - 1):.0f}% ({listing}, {len(files)} files, one "
                "thread)"
            )
        self.best, self.mine = best, mine
        return None

    def apply(self, anatomy: InlineAnatomy, pipeline: Any) -> Applied:
        return Applied(DecoderSwapDataset(anatomy.dataset, self.best["decoder"], self.factor))

    def side_effect(
        self, anatomy: InlineAnatomy, pipeline: Any, applied: Applied
    ) -> dict[str, Any]:
        best, mine = self.best, self.mine
        same = best["psnr_db"] is None
        pixels = (
            "the pixels are identical to your decoder's (PSNR ∞)"
            if same
            else f"alters what the model sees: PSNR {best['psnr_db']:.1f} dB against your decoder"
        )
        return {
            "summary": (
                f"decodes with {best['decoder']} ({best['ms_per_image']:.2f} ms per image against "
                f"{mine['ms_per_image']:.2f} ms for {self.user}, one thread, {self.files} of your "
                f"files; decoding is {100 * self.share:.0f}% of an item); {pixels}"
            ),
            "alters_output": not same,
            "decoder": best["decoder"],
            "user_decoder": self.user,
            "decode_share": round(float(self.share), 3),
            "decoders": self.table,
        }

    def patch(self, anatomy: InlineAnatomy, pipeline: Any) -> Patch:
        best = self.best["decoder"]
        words = (
            f"Decode the JPEGs with {best} instead of {self.user} in "
            f"{anatomy.cls.__name__}.__getitem__."
        )
        if not self.paths or best not in ("OpenCV imdecode", "PIL"):
            return Patch(
                None, words, False, "the decode reads from file objects, not paths; no diff"
            )
        lines = anatomy.source.lines
        start = anatomy.function.lineno - 1
        end = anatomy.function.end_lineno or len(lines)
        new, changed = list(lines), 0
        for i in range(start, end):
            line = lines[i].rstrip("\n")
            m = PIL_OPEN.match(line)
            if best == "OpenCV imdecode" and m and is_statement(line):
                new[i] = (
                    f"{m.group(1)}{m.group(2)} = Image.fromarray(cv2.cvtColor(cv2.imread("
                    f"str({m.group(3)})), cv2.COLOR_BGR2RGB))  # OpenCV decodes faster here\n"
                )
                changed += 1
                continue
            m = CV2_READ.match(line)
            if best == "PIL" and m:
                new[i] = (
                    f"{m.group(1)}cv2.cvtColor(np.asarray(Image.open({m.group(2)})"
                    f'.convert("RGB")), cv2.COLOR_RGB2BGR){m.group(3)}'
                    "  # Pillow decodes faster here\n"
                )
                changed += 1
        if not changed:
            return Patch(None, words, False, "no decode line of a form stallscope rewrites")
        needs = ["import cv2", "import numpy as np", "from PIL import Image"]
        text = _with_imports("".join(new), anatomy.source.module, needs)

        def verify(module: Any) -> str | None:
            patched = patched_class(module, anatomy.cls.__name__)
            ours = batches(fresh_instance(anatomy.dataset, patched), pipeline)
            return check_batches_structure(ours, anatomy, pipeline)

        return verified_patch(anatomy.source, text, words, verify)


def _with_imports(text: str, module: Any, needs: list[str]) -> str:
    """``text`` with each import in ``needs`` added after the last top-level import, unless the
    module already binds that name."""
    import ast

    tree = ast.parse(text)
    last = max(
        (
            n.end_lineno or n.lineno
            for n in tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom))
        ),
        default=0,
    )
    lines = text.splitlines(keepends=True)
    missing = [n for n in needs if n.split()[-1] not in vars(module)]
    return "".join([*lines[:last], *(f"{n}\n" for n in missing), *lines[last:]])
