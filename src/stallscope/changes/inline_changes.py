"""The code changes for a dataset that does its work inline in ``__getitem__`` (NOTE [inline
prefix] in ``inline``): the same ids and checks as the transform-list changes, the code found by
line instead of by stage.

* ``prefix-cache``: the statements before the first random one run once per index; the values
  they leave for the rest of the method are kept in a :class:`~.wrappers.SharedPrefixCache`. The
  probe runs the patched method itself (:class:`~.wrappers.PatchedMethodDataset`, compiled from
  the text the diff prints).
* ``reduced-decode``: where a resize follows the decode and shrinks the image by 2× or more in
  each direction, JPEGs are decoded at 1/2, 1/4 or 1/8 size (Pillow's ``draft``, OpenCV's
  ``IMREAD_REDUCED_COLOR_*``); the side effect is the PSNR of the resize's output against the
  full decode's.
* ``integer-transfer`` and ``batch-augment`` say why they do not apply (the float conversion and
  the tensor stages are statements of the method, which these changes do not move).
"""

from __future__ import annotations

import ast
import math
import os
import shutil
import tempfile
import textwrap
from typing import Any

import numpy as np

from ..pipeline.structure import describe_structure
from .anatomy import array_of, as_array, seeded
from .base import Applied, Change, Patch, batches
from .inline import (
    DECODE_CALLS,
    JPEG_DECODE_CALLS,
    READ_CALLS,
    InlineAnatomy,
    decoded_sizes,
    image_size,
    prefix_values,
    trace_item,
)
from .prefix_cache import fresh_instance, placement
from .reduced_decode import FACTORS, psnr, reduced_decode_text
from .source import apply_command, exec_patched, helper_block, unified_diff
from .wrappers import (
    PREFIX_CACHE_SOURCE,
    PatchedMethodDataset,
    ReducedDecodeDataset,
    SharedPrefixCache,
    dump_size,
    reduced_decode,
)


def equal(a: Any, b: Any) -> bool:
    """Batches equal in structure and value (tensors, arrays, numbers, strings, nested)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    x, y = as_array(a), as_array(b)
    if x is not None or y is not None:
        return (
            x is not None
            and y is not None
            and x.shape == y.shape
            and x.dtype == y.dtype
            and bool(np.array_equal(x, y))
        )
    try:
        return bool(a == b)
    except Exception:
        return False


def reproducible(anatomy: InlineAnatomy, pipeline: Any) -> bool:
    """Whether the user's batches repeat under the same seeds of ``random``, NumPy and torch (an
    albumentations Compose draws from generators of its own: they do not)."""
    key = ("reproducible", pipeline.batch_size)
    if key not in anatomy.memo:
        first = batches(anatomy.dataset, pipeline)
        anatomy.memo[("batches", pipeline.batch_size)] = first
        anatomy.memo[key] = all(
            equal(a, b) for a, b in zip(first, batches(anatomy.dataset, pipeline))
        )
    return bool(anatomy.memo[key])


def check_batches(ours: list[Any], anatomy: InlineAnatomy, pipeline: Any) -> str | None:
    """None when ``ours`` match the user's batches (in value when those repeat under the seeds,
    else in structure), else what differs."""
    from .base import same_structure

    exact = reproducible(anatomy, pipeline)
    theirs = anatomy.memo[("batches", pipeline.batch_size)]
    if exact:
        if not all(equal(a, b) for a, b in zip(ours, theirs)):
            return "its batches differ from yours under the same seeds"
        return None
    return same_structure(ours, theirs)


def method_source(text: str, class_name: str) -> str | None:
    """The text of ``class_name.__getitem__`` in the module ``text``, dedented."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__getitem__":
                    first = min([item.lineno, *(d.lineno for d in item.decorator_list)])
                    return textwrap.dedent("".join(lines[first - 1 : item.end_lineno]))
    return None


class InlinePrefixCache(Change):
    id = "prefix-cache"
    title = "Keep the deterministic prefix"

    def applies(self, anatomy: InlineAnatomy, pipeline: Any) -> str | None:
        where = anatomy.first_random_text()
        if not anatomy.prefix:
            return f"the first statement of __getitem__ already draws random numbers ({where})"
        calls = anatomy.calls_in(anatomy.prefix)
        if not calls & (READ_CALLS | DECODE_CALLS):
            return (
                "no known read or decode call (Image.open, cv2.imread, np.load, a file read) "
                f"runs before the first random draw ({where})"
            )
        if not anatomy.live:
            return f"the statements before {where} leave nothing the rest of __getitem__ reads"
        self.values = prefix_values(anatomy, anatomy.indices[0])
        per_item = dump_size(tuple(self.values[n] for n in anatomy.live))
        total = per_item * len(anatomy.dataset)
        found = placement(total)
        if found is None:
            return (
                f"the cache ({total / 2**20:,.0f} MB) fits neither the memory budget nor the free "
                "disk space"
            )
        self.bytes_per_item, self.total_bytes, self.where = per_item, total, found
        return None

    def _names(self, anatomy: InlineAnatomy) -> str:
        used = set(anatomy.live) | {anatomy.index_param}
        for s in anatomy.statements:
            used |= s.stores | s.loads
        return next(n for n in ("cached", "_cached", "_prefix_cached") if n not in used)

    def text(self, anatomy: InlineAnatomy, folder: str) -> str:
        """The user's module with the prefix of ``__getitem__`` behind the cache."""
        lines = anatomy.source.lines
        prefix = anatomy.prefix
        first, last = prefix[0].first - 1, prefix[-1].last  # 0-based, end exclusive
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        cached, idx = self._names(anatomy), anatomy.index_param
        live = anatomy.live
        packed = f"({', '.join(live)},)" if len(live) == 1 else f"({', '.join(live)})"
        unpack = f"({live[0]},)" if len(live) == 1 else ", ".join(live)
        body = [f"{indent}{cached} = _PREFIX_CACHE.get({idx})\n", f"{indent}if {cached} is None:\n"]
        body += [("    " + line) if line.strip() else line for line in lines[first:last]]
        body.append(f"{indent}    {cached} = _PREFIX_CACHE.put({idx}, {packed})\n")
        body.append(f"{indent}{unpack} = {cached}\n")
        new = [*lines[:first], *body, *lines[last:]]
        helpers = (
            PREFIX_CACHE_SOURCE.strip() + f"\n\n\n_PREFIX_CACHE = SharedPrefixCache({folder!r})\n"
        )
        return "".join(new) + helper_block(
            f"cache of the deterministic prefix of {anatomy.cls.__name__}.__getitem__", helpers
        )

    def apply(self, anatomy: InlineAnatomy, pipeline: Any) -> Applied:
        folder = tempfile.mkdtemp(prefix="stallscope-prefix-", dir=self.where[1])
        method = method_source(self.text(anatomy, folder), anatomy.cls.__name__)
        if method is None:
            raise RuntimeError("the patched __getitem__ could not be found in the patched module")
        dataset = PatchedMethodDataset(
            anatomy.dataset,
            anatomy.cls.__module__,
            method,
            str(anatomy.source.path),
            folder,
        )
        return Applied(
            dataset,
            fill=True,
            cleanup=lambda: shutil.rmtree(folder, ignore_errors=True),
            notes={"cache": SharedPrefixCache(folder)},
        )

    def side_effect(
        self, anatomy: InlineAnatomy, pipeline: Any, applied: Applied
    ) -> dict[str, Any]:
        cache: SharedPrefixCache = applied.notes["cache"]
        index = anatomy.indices[0]
        with seeded(3):
            first = applied.dataset[index]
        with seeded(3):
            second = applied.dataset[index]
        with seeded(3):
            theirs = anatomy.dataset[index]
        kept = cache.get(index)
        same_prefix = kept is not None and all(
            equal(v, self.values[n]) for n, v in zip(anatomy.live, kept)
        )
        if reproducible(anatomy, pipeline):
            unchanged = same_prefix and equal(first, theirs) and equal(second, theirs)
        else:
            unchanged = same_prefix
        cached = len(cache)
        measured = cache.nbytes()
        per_item = measured / cached if cached else self.bytes_per_item
        full = per_item * len(anatomy.dataset)
        label = anatomy.prefix_label()
        summary = (
            f"caches {label} of {anatomy.cls.__name__}.__getitem__ ({', '.join(anatomy.live)}: "
            f"{per_item / 2**10:,.0f} KB per item, {full / 2**20:,.0f} MB for all "
            f"{len(anatomy.dataset):,} items) in {self.where[0]}; the first pass pays the full "
            "cost and writes the cache"
        )
        if not unchanged:
            summary += "; CAUTION: a cached item differed from yours"
        elif reproducible(anatomy, pipeline):
            summary += "; later passes give the same samples"
        else:
            summary += (
                "; the cached values equal what your code computes (the rest draws from "
                "generators the seeds do not reach, so whole items were compared in structure)"
            )
        return {
            "summary": summary,
            "alters_output": not unchanged,
            "prefix": label,
            "first_random": anatomy.first_random_text(),
            "placement": self.where[0],
            "bytes_per_item": int(per_item),
            "cache_bytes_all_items": int(full),
            "items_cached": cached,
        }

    def patch(self, anatomy: InlineAnatomy, pipeline: Any) -> Patch:
        name = anatomy.cls.__name__
        folder = os.path.join(
            self.where[1], f"{anatomy.cls.__module__.replace('.', '-')}-{name}-prefix-cache"
        )
        words = (
            f"In {name}.__getitem__, look the index up in a cache shared by the workers (files in "
            f"{folder}) before {anatomy.prefix_label()}; on a miss run those lines and store "
            f"{', '.join(anatomy.live)}; the rest, from {anatomy.first_random_text()}, runs as "
            "before. Delete the folder when the files or those lines change."
        )
        text = self.text(anatomy, folder)
        why = self._verify(anatomy, pipeline, text)
        if why:
            return Patch(None, words, False, why)
        return Patch(
            unified_diff(anatomy.source.path, anatomy.source.text, text),
            words,
            True,
            apply=apply_command(anatomy.source.path),
        )

    def _verify(self, anatomy: InlineAnatomy, pipeline: Any, text: str) -> str | None:
        folder = tempfile.mkdtemp(prefix="stallscope-verify-")
        try:
            with exec_patched(anatomy.source, text) as module:
                patched = getattr(module, anatomy.cls.__name__, None)
                if not isinstance(patched, type):
                    return f"the patched module has no class {anatomy.cls.__name__}"
                module._PREFIX_CACHE.folder = folder
                clone = fresh_instance(anatomy.dataset, patched)
                # The first pass fills the cache, the second reads it: both must give your
                # batches.
                for _ in range(2):
                    why = check_batches(batches(clone, pipeline), anatomy, pipeline)
                    if why:
                        return why
                kept = module._PREFIX_CACHE.get(anatomy.indices[0])
                if kept is None and anatomy.indices[0] < 2 * pipeline.batch_size:
                    return "the patched code wrote nothing to its cache"
                if not os.listdir(folder):
                    return "the patched code wrote nothing to its cache"
                if kept is not None and not all(
                    equal(v, self.values[n]) for n, v in zip(anatomy.live, kept)
                ):
                    return "the cached values differ from what your code computes"
        except Exception as exc:  # compiling or running the patched module
            return f"the patched module failed: {type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return None


class InlineReducedDecode(Change):
    id = "reduced-decode"
    title = "Reduced-size decode"

    def applies(self, anatomy: InlineAnatomy, pipeline: Any) -> str | None:
        decode = next(
            (
                s.index
                for s in anatomy.statements
                if any(t.calls.get(s.index, set()) & JPEG_DECODE_CALLS for t in anatomy.traces)
            ),
            None,
        )
        if decode is None:
            return (
                "no image is decoded through PIL.Image.open or cv2.imread/imdecode in __getitem__"
            )
        factor, shrink = 8, math.inf
        for trace in anatomy.traces:
            found = next(
                (
                    entry
                    for s in anatomy.statements[decode:]
                    for entry in trace.shrinks.get(s.index, [])
                ),
                None,
            )
            if found is None or found[0] is None or found[1] is None:
                return (
                    "no resize follows the decode (a crop keeps the pixels' scale, so a smaller "
                    "decode would change what the crops show)"
                )
            (h, w), (oh, ow) = found[0], found[1]
            shrink = min(shrink, h / oh, w / ow)
            factor = min(factor, next((f for f in FACTORS if h / f >= oh and w / f >= ow), 1))
            self.resize = found[2]
        if factor < 2:
            return (
                f"the first resize after the decode shrinks the image by {shrink:.1f}×, "
                "less than 2×"
            )
        self.factor, self.decode, self.shrink = factor, decode, shrink
        self.out_size = (oh, ow)
        full, reduced, why = self._decoded(anatomy, factor)
        if why:
            return why
        self.full, self.reduced = full, reduced
        return None

    def _decoded(
        self, anatomy: InlineAnatomy, factor: int
    ) -> tuple[list[Any], list[Any], str | None]:
        """The decoded image per traced item at full and at 1/``factor`` size, or why not."""
        full: list[Any] = []
        reduced: list[Any] = []
        for n, index in enumerate(anatomy.indices):
            calls: list[int] = []
            plain = trace_item(
                anatomy.dataset, anatomy.cls, anatomy.statements, index, seed=n, keep_values=True
            )
            with reduced_decode(factor, calls):
                small = trace_item(
                    anatomy.dataset,
                    anatomy.cls,
                    anatomy.statements,
                    index,
                    seed=n,
                    keep_values=True,
                )
            if not calls:
                return [], [], "no JPEG reached Image.open or cv2.imread/imdecode in __getitem__"
            a = _largest(plain.values.get(self.decode, {}))
            b = _largest(small.values.get(self.decode, {}))
            if a is None or b is None:
                return [], [], "the decoded image could not be read after the decode"
            if image_size(a) == image_size(b):
                return [], [], "decoding at reduced size did not change the decoded image's size"
            if describe_structure(plain.item) != describe_structure(small.item):
                return [], [], "with a reduced decode the items come out in another shape"
            full.append(a)
            reduced.append(b)
        return full, reduced, None

    def apply(self, anatomy: InlineAnatomy, pipeline: Any) -> Applied:
        return Applied(ReducedDecodeDataset(anatomy.dataset, self.factor))

    def side_effect(
        self, anatomy: InlineAnatomy, pipeline: Any, applied: Applied
    ) -> dict[str, Any]:
        oh, ow = self.out_size
        values = [
            psnr(resized(a, ow, oh), resized(b, ow, oh)) for a, b in zip(self.full, self.reduced)
        ]
        finite = [v for v in values if math.isfinite(v)] or [99.0]
        mean, worst = float(np.mean(finite)), float(min(finite))
        trace = anatomy.traces[0]
        first = next(e for s in anatomy.statements for e in trace.shrinks.get(s.index, []))
        (h, w), (oh, ow) = first[0], first[1]
        return {
            "summary": (
                f"alters what the model sees: JPEGs are decoded at 1/{self.factor} size "
                f"({w}×{h} → {w // self.factor}×{h // self.factor}) before {self.resize} shrinks "
                f"them to {ow}×{oh}; resized to that size, they differ from the full decode "
                f"resized alike by PSNR {mean:.1f} dB on average (worst {worst:.1f} dB, "
                f"{len(values)} images)"
            ),
            "alters_output": True,
            "factor": self.factor,
            "psnr_db": round(mean, 2),
            "psnr_worst_db": round(worst, 2),
            "images": len(values),
        }

    def patch(self, anatomy: InlineAnatomy, pipeline: Any) -> Patch:
        f = self.factor
        words = (
            'Right after Image.open(...), call image.draft("RGB", (image.width // '
            f"{f}, image.height // {f})) (OpenCV: cv2.imread(path, cv2.IMREAD_REDUCED_COLOR_{f})), "
            f"so JPEGs decode at 1/{f} size; {self.resize} then shrinks them less."
        )
        lines = anatomy.source.lines
        start = anatomy.function.lineno - 1
        end = anatomy.function.end_lineno or len(lines)
        middle, changed = reduced_decode_text(lines[start:end], f)
        if not changed:
            return Patch(
                None,
                words,
                False,
                f"no `x = Image.open(...)` or one-argument cv2.imread line in "
                f"{anatomy.cls.__name__}.__getitem__",
            )
        text = "".join(lines[:start]) + middle + "".join(lines[end:])
        try:
            with exec_patched(anatomy.source, text) as module:
                patched = getattr(module, anatomy.cls.__name__, None)
                if not isinstance(patched, type):
                    return Patch(
                        None,
                        words,
                        False,
                        f"the patched module has no class {anatomy.cls.__name__}",
                    )
                clone = fresh_instance(anatomy.dataset, patched)
                ours = batches(clone, pipeline)
                why = check_batches_structure(ours, anatomy, pipeline)
                if why:
                    return Patch(None, words, False, why)
                after = decoded_sizes(clone, anatomy.indices[0])
                before = decoded_sizes(anatomy.dataset, anatomy.indices[0])
                if not after or not before or after[0] == before[0]:
                    return Patch(None, words, False, "the patched code still decodes at full size")
        except Exception as exc:
            return Patch(
                None, words, False, f"the patched module failed: {type(exc).__name__}: {exc}"
            )
        return Patch(
            unified_diff(anatomy.source.path, anatomy.source.text, text),
            words,
            True,
            apply=apply_command(anatomy.source.path),
        )


def check_batches_structure(ours: list[Any], anatomy: InlineAnatomy, pipeline: Any) -> str | None:
    from .base import same_structure

    reproducible(anatomy, pipeline)
    return same_structure(ours, anatomy.memo[("batches", pipeline.batch_size)])


def _largest(values: dict[str, Any]) -> Any:
    """The largest image among a statement's image-like locals."""
    best, area = None, -1
    for value in values.values():
        size = image_size(value)
        if size is not None and size[0] * size[1] > area:
            best, area = value, size[0] * size[1]
    return best


def resized(value: Any, width: int, height: int) -> np.ndarray:
    """An image (PIL or uint8 array) resized bilinearly to ``width``×``height``, as uint8."""
    from PIL import Image

    if hasattr(value, "getbands"):
        image = value.convert("RGB")
    else:
        array = array_of(value)
        if array.dtype != np.uint8:
            array = np.clip(array, 0, 255).astype(np.uint8)
        image = Image.fromarray(array)
    return np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))


class NotMoved(Change):
    """A change that does not apply to an inline ``__getitem__``, with the reason."""

    def __init__(self, id: str, title: str, why: str) -> None:
        self.id, self.title, self.why = id, title, why

    def applies(self, anatomy: Any, pipeline: Any) -> str | None:
        return self.why.format(name=anatomy.cls.__name__)


def inline_changes(ids: list[str] | None = None) -> list[Change]:
    every: list[Change] = [
        InlinePrefixCache(),
        InlineReducedDecode(),
        NotMoved(
            "integer-transfer",
            "Integer transfer (uint8 to the main process)",
            "the float conversion and normalising are statements of {name}.__getitem__, not "
            "stages of a transform list; this change moves them to the batch only from a list",
        ),
        NotMoved(
            "batch-augment",
            "Batch-level augmentation",
            "the augmentations are statements of {name}.__getitem__, not stages of a transform "
            "list; this change moves tensor stages to the batch only from a list",
        ),
    ]
    return every if ids is None else [c for c in every if c.id in ids]
