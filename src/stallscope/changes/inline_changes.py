"""The code changes for a dataset that does its work inline in ``__getitem__`` (NOTE [inline
prefix] in ``inline``): the same ids and checks as the transform-list changes, the code found by
line instead of by stage.

* ``prefix-cache``: the statements before the first random one run once per index; the values
  they leave for the rest of the method are kept in a :class:`~.wrappers.SharedPrefixCache`. The
  probe runs the patched method itself (:class:`~.wrappers.PatchedMethodDataset`, compiled from
  the text the diff prints).
* ``reduced-decode``: where a resize follows the decode and shrinks the image by 2× or more in
  each direction, JPEGs are decoded at 1/2, 1/4 or 1/8 size (Pillow's ``draft``, OpenCV's
  ``IMREAD_REDUCED_COLOR_*``); the side effect is the PSNR of the decoded images, full and
  reduced, resized alike to the resize's output size.
* ``integer-transfer``: where the item's float image is a per-channel scale and shift of a uint8
  image some statement leaves, the statements after it are dropped and each batch is normalised
  in the main process.
* ``batch-augment`` says why it does not apply (it moves stages of a transform list only).
* ``faster-decode`` (``decoders``) races the JPEG decoders this machine has on the user's files.
  For an albumentations ``Compose`` called in ``__getitem__``, its leading deterministic transforms
  join the cached prefix (``compose_head``).
"""

from __future__ import annotations

import ast
import math
import os
import shutil
import tempfile
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..pipeline.structure import describe_structure
from .anatomy import array_of, as_array, get_slot, seeded, set_slot
from .base import (
    Applied,
    Change,
    Patch,
    batch_step_seconds,
    batches,
    copy_batch,
    max_difference,
    nbytes_at,
    patched_class,
    verified_patch,
)
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
from .integer_transfer import listed, normalize_batch_helper
from .prefix_cache import PlacedCache, fresh_instance
from .reduced_decode import FACTORS, draft_words, psnr, psnr_effect, reduced_decode_text
from .source import helper_block
from .wrappers import (
    PREFIX_CACHE_SOURCE,
    AffineBatch,
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


TAIL_SOURCE = '''
_TAILS = {}


def _compose_tail(compose, start):
    """``compose`` without its first ``start`` transforms (they run before the cache), made once
    per process."""
    tail = _TAILS.get((id(compose), start))
    if tail is None:
        tail = _TAILS[(id(compose), start)] = type(compose)(compose.transforms[start:], p=compose.p)
    return tail
'''

# Albumentations transforms that, applied always (p=1), do the same to every call; a transform
# joins the prefix only if it is of one of these kinds and gives the same output twice.
DETERMINISTIC_KINDS = {
    "Resize",
    "LongestMaxSize",
    "SmallestMaxSize",
    "CenterCrop",
    "Crop",
    "PadIfNeeded",
    "ToGray",
    "ToRGB",
    "ToFloat",
    "FromFloat",
    "Normalize",
}


@dataclass
class ComposeHead:
    compose: str  # the expression naming the Compose in __getitem__ (``self.transform``)
    source: str  # the variable passed as image= (and assigned the output)
    count: int  # leading transforms that join the prefix
    names: list[str]
    line: int  # the file line of the call
    transforms: list[Any]

    def run(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image=image)["image"]
        return image


def compose_head(anatomy: InlineAnatomy, values: dict[str, Any]) -> ComposeHead | None:
    """Where the first random statement is ``x = self.T(image=x)["image"]`` with ``self.T`` an
    albumentations Compose: its leading transforms that are deterministic by kind and by running
    (the same output twice, p=1), or None."""
    if anatomy.first_random >= len(anatomy.statements):
        return None
    statement = anatomy.statements[anatomy.first_random]
    text = "".join(anatomy.source.lines[statement.first - 1 : statement.last])
    try:
        node = ast.parse(textwrap.dedent(text)).body[0]
    except (SyntaxError, IndexError):
        return None
    self_name = anatomy.function.args.args[0].arg
    if not (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Subscript)
        and isinstance(node.value.slice, ast.Constant)
        and node.value.slice.value == "image"
        and isinstance(node.value.value, ast.Call)
    ):
        return None
    call = node.value.value
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == self_name
        and not call.args
        and len(call.keywords) == 1
        and call.keywords[0].arg == "image"
        and isinstance(call.keywords[0].value, ast.Name)
    ):
        return None
    source = call.keywords[0].value.id
    if node.targets[0].id != source or source not in values:
        return None
    compose = getattr(anatomy.dataset, func.attr, None)
    if (
        compose is None
        or not type(compose).__module__.startswith("albumentations")
        or not isinstance(getattr(compose, "transforms", None), list)
        or getattr(compose, "p", 1.0) < 1.0
    ):
        return None
    image = values[source]
    head: list[Any] = []
    for transform in compose.transforms:
        if type(transform).__name__ not in DETERMINISTIC_KINDS or getattr(transform, "p", 0) < 1:
            break
        try:
            first = transform(image=image)["image"]
            again = transform(image=image)["image"]
        except Exception:
            break
        if not equal(first, again):
            break
        head.append(transform)
        image = first
    if not head or len(head) == len(compose.transforms):
        return None
    return ComposeHead(
        compose=f"{self_name}.{func.attr}",
        source=source,
        count=len(head),
        names=[type(t).__name__ for t in head],
        line=statement.first,
        transforms=head,
    )


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


class InlinePrefixCache(PlacedCache, Change):
    id = "prefix-cache"
    title = "Keep the deterministic prefix"

    def applies(self, anatomy: InlineAnatomy, pipeline: Any) -> str | None:
        where = anatomy.first_random_text()
        if not anatomy.prefix:
            if anatomy.random_by is None and anatomy.first_random < len(anatomy.statements):
                # The prefix ends at the return too: a one-statement __getitem__ has none.
                return (
                    f"__getitem__ returns in its first statement: nothing comes before it ({where})"
                )
            return f"the first statement of __getitem__ already draws random numbers ({where})"
        calls = anatomy.calls_in(anatomy.prefix)
        if not calls & (READ_CALLS | DECODE_CALLS):
            # Where nothing draws random numbers, the prefix ends at the return.
            end = "the first random draw" if anatomy.random_by is not None else "the return"
            return (
                "no known read or decode call (Image.open, cv2.imread, np.load, a file read) "
                f"runs before {end} ({where})"
            )
        if not anatomy.live:
            return f"the statements before {where} leave nothing the rest of __getitem__ reads"
        self.values = prefix_values(anatomy, anatomy.indices[0])
        self.head = compose_head(anatomy, self.values)
        if self.head is not None:  # the Compose's deterministic leading transforms join the prefix
            self.values[self.head.source] = self.head.run(self.values[self.head.source])
        per_item = dump_size(tuple(self.values[n] for n in anatomy.live))
        return self.place(per_item, len(anatomy.dataset))

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
        head = self.head
        if head is not None:
            used = set().union(*(st.stores | st.loads for st in anatomy.statements))
            step = next(n for n in ("transform", "_transform", "_stallscope_t") if n not in used)
            body += [
                f"{indent}    for {step} in {head.compose}.transforms[:{head.count}]:  "
                f"# {', '.join(head.names)}: the same every epoch\n",
                f'{indent}        {head.source} = {step}(image={head.source})["image"]\n',
            ]
        body.append(f"{indent}    {cached} = _PREFIX_CACHE.put({idx}, {packed})\n")
        body.append(f"{indent}{unpack} = {cached}\n")
        rest = list(lines[last:])
        if head is not None:
            at = head.line - 1 - last
            rest[at] = rest[at].replace(
                f"{head.compose}(", f"_compose_tail({head.compose}, {head.count})(", 1
            )
        new = [*lines[:first], *body, *rest]
        helpers = (
            PREFIX_CACHE_SOURCE.strip() + f"\n\n\n_PREFIX_CACHE = SharedPrefixCache({folder!r})\n"
        )
        if head is not None:
            helpers += "\n\n" + TAIL_SOURCE.strip() + "\n"
        return "".join(new) + helper_block(
            f"cache of the deterministic prefix of {anatomy.cls.__name__}.__getitem__", helpers
        )

    def apply(self, anatomy: InlineAnatomy, pipeline: Any) -> Applied:
        folder = tempfile.mkdtemp(prefix="stallscope-prefix-", dir=self.where[1])
        dataset = patched_method_dataset(
            anatomy,
            self.text(anatomy, folder),
            folder,
            helpers=TAIL_SOURCE if self.head is not None else "",
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
        if self.head is not None:
            label += f" + {', '.join(self.head.names)} of {self.head.compose}"
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
        verify_in = tempfile.mkdtemp(prefix="stallscope-verify-")
        try:
            return verified_patch(
                anatomy.source,
                text,
                words,
                lambda module: self._verify(anatomy, pipeline, module, verify_in),
            )
        finally:
            shutil.rmtree(verify_in, ignore_errors=True)

    def _verify(
        self, anatomy: InlineAnatomy, pipeline: Any, module: Any, folder: str
    ) -> str | None:
        module._PREFIX_CACHE.folder = folder
        clone = fresh_instance(anatomy.dataset, patched_class(module, anatomy.cls.__name__))
        # The first pass fills the cache, the second reads it: both must give your batches.
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
        trace = anatomy.traces[0]
        first = next(e for s in anatomy.statements for e in trace.shrinks.get(s.index, []))
        (h, w), (oh, ow) = first[0], first[1]
        return psnr_effect(
            self.factor,
            values,
            "images",
            lambda mean, worst: (
                f"alters what the model sees: JPEGs are decoded at 1/{self.factor} size "
                f"({w}×{h} → {w // self.factor}×{h // self.factor}) before {self.resize} shrinks "
                f"them to {ow}×{oh}; resized to that size, they differ from the full decode "
                f"resized alike by PSNR {mean:.1f} dB on average (worst {worst:.1f} dB, "
                f"{len(values)} images)"
            ),
        )

    def patch(self, anatomy: InlineAnatomy, pipeline: Any) -> Patch:
        f = self.factor
        words = draft_words(f) + f"; {self.resize} then shrinks them less."
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

        def verify(module: Any) -> str | None:
            clone = fresh_instance(anatomy.dataset, patched_class(module, anatomy.cls.__name__))
            why = check_batches_structure(batches(clone, pipeline), anatomy, pipeline)
            if why:
                return why
            after = decoded_sizes(clone, anatomy.indices[0])
            before = decoded_sizes(anatomy.dataset, anatomy.indices[0])
            if not after or not before or after[0] == before[0]:
                return "the patched code still decodes at full size"
            return None

        return verified_patch(anatomy.source, text, words, verify)


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


def float_slot(item: Any, shapes: list[tuple[int, ...]], depth: int = 0) -> tuple[Any, ...] | None:
    """Where in ``item`` a float tensor of one of ``shapes`` sits."""
    if hasattr(item, "is_floating_point") and item.is_floating_point():
        return () if tuple(item.shape) in shapes else None
    if depth >= 2:
        return None
    pairs = (
        list(enumerate(item))
        if isinstance(item, (tuple, list))
        else list(item.items())
        if isinstance(item, dict)
        else []
    )
    for key, value in pairs:
        found = float_slot(value, shapes, depth + 1)
        if found is not None:
            return (key, *found)
    return None


class InlineIntegerTransfer(Change):
    """The statements that turn the last uint8 image into the normalised float image are removed
    from ``__getitem__``; the batch is normalised in the main process (``normalize_batch``). Applies
    where the item's float image is, measured on the traced items, one per-channel scale and shift
    of a uint8 image some statement leaves, and the return statement alone, given that uint8
    image, hands it on as a uint8 tensor."""

    id = "integer-transfer"
    title = "Integer transfer (uint8 to the main process)"

    def applies(self, anatomy: InlineAnatomy, pipeline: Any) -> str | None:
        statements = anatomy.statements
        if not statements or not statements[-1].is_return:
            return "__getitem__ does not end in a return statement"
        ret = len(statements) - 1
        traces = [
            trace_item(anatomy.dataset, anatomy.cls, statements, index, seed=n, keep_values=True)
            for n, index in enumerate(anatomy.indices)
        ]
        for j in range(ret - 2, -1, -1):  # at least one statement between it and the return
            for name in sorted(traces[0].values.get(j, {})):
                found = self._fit(traces, j, name)
                if found is not None:
                    self.after, self.name = j, name
                    self.slot, self.channel, self.scale, self.shift = found
                    self.removed = statements[j + 1 : ret]
                    return None
        why = (
            "the item's float image is not a per-channel scale and shift of a uint8 image a "
            "statement of __getitem__ leaves"
        )
        last_uint8 = max(
            (
                j
                for j, values in traces[0].values.items()
                if any(
                    isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 3
                    for v in values.values()
                )
            ),
            default=None,
        )
        if last_uint8 is None:
            return (
                f"no statement of {anatomy.cls.__name__}.__getitem__ leaves a uint8 image "
                "(H×W×C) for the item to be a scale and shift of"
            )
        if last_uint8 is not None:
            drawn = [
                s
                for s in statements[last_uint8 + 1 : ret]
                if any(s.index in t.draws for t in anatomy.traces)
            ]
            if drawn:
                why += (
                    f" (line {drawn[0].first}, `{drawn[0].text}`, draws random numbers after the "
                    "last uint8 image)"
                )
        return why

    @staticmethod
    def _fit(
        traces: list[Any], j: int, name: str
    ) -> tuple[tuple[Any, ...], int, list[float], list[float]] | None:
        xs, ys = [], []
        slot, channel = None, 0
        for trace in traces:
            u = trace.values.get(j, {}).get(name)
            if not isinstance(u, np.ndarray) or u.dtype != np.uint8 or u.ndim != 3:
                return None
            h, w, c = u.shape
            found = float_slot(trace.item, [(c, h, w), (h, w, c)])
            if found is None or (slot is not None and found != slot):
                return None
            slot = found
            y = array_of(get_slot(trace.item, found)).astype(np.float64)
            channel = 0 if y.shape == (c, h, w) else 2
            yc = y if channel == 0 else np.moveaxis(y, 2, 0)
            xs.append(np.moveaxis(u, 2, 0).reshape(c, -1).astype(np.float64))
            ys.append(yc.reshape(c, -1))
        if slot is None:
            return None
        x, y = np.concatenate(xs, 1), np.concatenate(ys, 1)
        scale, shift = [], []
        for k in range(x.shape[0]):
            if np.ptp(x[k]) == 0:
                return None
            a, b = np.polyfit(x[k], y[k], 1)
            if np.max(np.abs(a * x[k] + b - y[k])) > 1e-4 * max(1.0, float(np.max(np.abs(y[k])))):
                return None
            scale.append(float(a))
            shift.append(float(b))
        return slot, channel, scale, shift

    def text(self, anatomy: InlineAnatomy) -> str:
        lines = anatomy.source.lines
        first, last = self.removed[0].first - 1, self.removed[-1].last
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        note = (
            f"{indent}# {self.name} stays uint8: each batch is normalised by normalize_batch() "
            "in the main process\n"
        )
        helpers = normalize_batch_helper(
            self.scale, self.shift, self.channel + 1, "__getitem__ used to make"
        )
        return "".join([*lines[:first], note, *lines[last:]]) + helper_block(
            f"integer transfer for {anatomy.cls.__name__}", helpers
        )

    def _step(self) -> AffineBatch:
        return AffineBatch(self.slot, self.scale, self.shift, self.channel)

    def apply(self, anatomy: InlineAnatomy, pipeline: Any) -> Applied:
        dataset = patched_method_dataset(anatomy, self.text(anatomy), tempfile.gettempdir())
        return Applied(dataset, main_step=self._step())

    def side_effect(
        self, anatomy: InlineAnatomy, pipeline: Any, applied: Applied
    ) -> dict[str, Any]:
        raw = batches(applied.dataset, pipeline, count=1)
        step = self._step()
        ours = [step(copy_batch(b)) for b in raw]
        reproducible(anatomy, pipeline)
        theirs = anatomy.memo[("batches", pipeline.batch_size)][:1]
        difference = max_difference(ours, theirs, self.slot)
        main_cost = batch_step_seconds(step, raw[0])
        before, after = nbytes_at(theirs[0], self.slot), nbytes_at(raw[0], self.slot)
        removed = _lines(self.removed)
        return {
            "summary": (
                f"workers send uint8 ({after / 2**20:,.2f} MB per batch instead of "
                f"{before / 2**20:,.2f} MB) and skip {removed} of {anatomy.cls.__name__}"
                f".__getitem__; the main process adds {1000 * main_cost:.2f} ms per batch on this "
                "CPU (less on an accelerator); batches equal yours within "
                f"{difference if difference is not None else float('nan'):.1e}"
            ),
            "alters_output": difference is None or difference > 1e-4,
            "max_abs_difference": difference,
            "bytes_per_batch": {"before": before, "after": after},
            "main_ms_per_batch_added": round(1000 * main_cost, 4),
        }

    def patch(self, anatomy: InlineAnatomy, pipeline: Any) -> Patch:
        words = (
            f"In {anatomy.cls.__name__}.__getitem__, drop {_lines(self.removed)} (the float "
            f"conversion and normalising of {self.name}) so the item's image stays uint8, and "
            "normalise each batch in the main process or on the "
            f"accelerator: x.float() * {listed(self.scale)} + {listed(self.shift)} per channel."
        )
        text = self.text(anatomy)

        def verify(module: Any) -> str | None:
            clone = fresh_instance(anatomy.dataset, patched_class(module, anatomy.cls.__name__))
            raw = batches(clone, pipeline)
            dtype = getattr(get_slot(raw[0], self.slot), "dtype", None)
            if str(dtype) != "torch.uint8":
                return f"the patched batches hold {dtype}, not torch.uint8"
            step = slot_step_at(self.slot, module.normalize_batch)
            ours = [step(b) for b in raw]
            if not reproducible(anatomy, pipeline):
                return check_batches_structure(ours, anatomy, pipeline)
            diff = max_difference(ours, anatomy.memo[("batches", pipeline.batch_size)], self.slot)
            return (
                None
                if diff is not None and diff <= 1e-4
                else f"its batches differ from yours by {diff}"
            )

        return verified_patch(anatomy.source, text, words, verify)


def patched_method_dataset(
    anatomy: InlineAnatomy, text: str, folder: str, *, helpers: str = ""
) -> PatchedMethodDataset:
    """The user's dataset with the ``__getitem__`` of the patched ``text`` (``folder``: where
    its files go)."""
    method = method_source(text, anatomy.cls.__name__)
    if method is None:
        raise RuntimeError("the patched __getitem__ could not be found in the patched module")
    return PatchedMethodDataset(
        anatomy.dataset,
        anatomy.cls.__module__,
        method,
        str(anatomy.source.path),
        folder,
        helpers=helpers,
    )


def slot_step_at(slot: tuple[Any, ...], fn: Any) -> Any:
    return lambda batch: set_slot(batch, slot, fn(get_slot(batch, slot)))


def _lines(statements: list[Any]) -> str:
    first, last = statements[0].first, statements[-1].last
    return f"line {first}" if first == last else f"lines {first}-{last}"


class NotMoved(Change):
    """A change that does not apply to an inline ``__getitem__``, with the reason."""

    def __init__(self, id: str, title: str, why: str) -> None:
        self.id, self.title, self.why = id, title, why

    def applies(self, anatomy: Any, pipeline: Any) -> str | None:
        return self.why.format(name=anatomy.cls.__name__)
