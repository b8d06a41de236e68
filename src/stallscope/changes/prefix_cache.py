"""Keep the deterministic prefix: the output of the stages before the first random one (read +
decode, plus any fixed resize before it), cached per index where every worker reads it.

Memory shared by the workers (files on ``/dev/shm``, a tmpfs) when the whole cache fits the memory
budget and the free space there, else the local disk. The gain is measured from the second pass;
the first pass (which fills the cache) and the cache's size are stated.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any

import psutil

from ..pipeline.structure import shallow_copy
from ..pipeline.transforms import get_path, replace_transforms
from ..thresholds import MEMORY_BUDGET_SHARE
from .anatomy import Anatomy, get_slot, same, seeded
from .base import Applied, Change, Patch, patched_class, run_two_batches, verified_patch
from .source import (
    helper_block,
    is_statement,
    method_lines,
)
from .wrappers import (
    PREFIX_CACHE_SOURCE,
    PrefixCachedDataset,
    PrefixSplit,
    SharedPrefixCache,
    dump_size,
)

SHM = "/dev/shm"
# A cache takes at most half the free space where it goes: the rest stays for the user's files.
SPACE_SHARE = 0.5


def placement(total_bytes: int) -> tuple[str, str] | None:
    """("shared memory" | "local disk", folder) for a cache of ``total_bytes``, or None when neither
    fits."""
    budget = MEMORY_BUDGET_SHARE * psutil.virtual_memory().available
    if (
        os.path.isdir(SHM)
        and total_bytes <= budget
        and total_bytes <= SPACE_SHARE * shutil.disk_usage(SHM).free
    ):
        return "shared memory", SHM
    folder = tempfile.gettempdir()
    if total_bytes <= SPACE_SHARE * shutil.disk_usage(folder).free:
        return "local disk", folder
    return None


class PlacedCache:
    """A change that caches every item: the size of its cache and where it goes."""

    bytes_per_item: float
    total_bytes: float
    where: tuple[str, str]

    def place(self, per_item: float, items: int) -> str | None:
        """Place a cache of ``items`` items of ``per_item`` bytes (:func:`placement`); why not
        where it fits nowhere."""
        total = per_item * items
        where = placement(int(total))
        if where is None:
            return (
                f"the cache ({total / 2**20:,.0f} MB) fits neither the memory budget nor the free "
                "disk space"
            )
        self.bytes_per_item, self.total_bytes, self.where = per_item, total, where
        return None


class PrefixCache(PlacedCache, Change):
    id = "prefix-cache"
    title = "Keep the deterministic prefix"

    def __init__(self, indices: int | None = None) -> None:
        self.indices = indices  # how many items the probe caches (the race's items)

    def prefix_label(self, anatomy: Anatomy) -> str:
        names = ["read + decode", *anatomy.names[: anatomy.first_random]]
        return " + ".join(names)

    def applies(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        if anatomy.item_slot is None:
            return (
                "the dataset does not return its transforms' output as it is, so a cached "
                "part cannot be put back"
            )
        per_item = max(dump_size((self._prefix_output(anatomy, s), None)) for s in anatomy.samples)
        return self.place(per_item, len(anatomy.dataset))

    @staticmethod
    def _prefix_output(anatomy: Anatomy, sample: Any) -> Any:
        k = anatomy.first_random
        return sample.outputs[k - 1] if k > 0 else sample.input

    def apply(self, anatomy: Anatomy, pipeline: Any) -> Applied:
        k = anatomy.first_random
        folder = tempfile.mkdtemp(prefix="stallscope-prefix-", dir=self.where[1])
        cache = SharedPrefixCache(folder)
        splitter = PrefixSplit(anatomy.stages[:k], anatomy.stages[k:])
        dataset = PrefixCachedDataset(
            anatomy.with_compose(splitter), splitter, anatomy.item_slot or (), cache
        )
        return Applied(
            dataset,
            fill=True,
            cleanup=lambda: shutil.rmtree(folder, ignore_errors=True),
            notes={"cache": cache},
        )

    def side_effect(self, anatomy: Anatomy, pipeline: Any, applied: Applied) -> dict[str, Any]:
        cache: SharedPrefixCache = applied.notes["cache"]
        # The cached item, run on, equals the user's under the same seeds: nothing the model sees
        # changes.
        sample = anatomy.samples[0]
        ours = applied.dataset
        with seeded(3):
            first = ours[sample.index]
        with seeded(3):
            second = ours[sample.index]
        with seeded(3):
            theirs = anatomy.dataset[sample.index]
        slot = anatomy.item_slot or ()
        unchanged = same(get_slot(first, slot), get_slot(theirs, slot)) and same(
            get_slot(second, slot), get_slot(theirs, slot)
        )
        cached = len(cache)
        measured = cache.nbytes()
        per_item = measured / cached if cached else self.bytes_per_item
        full = per_item * len(anatomy.dataset)
        return {
            "summary": (
                f"caches {self.prefix_label(anatomy)} ({per_item / 2**10:,.0f} KB per item, "
                f"{full / 2**20:,.0f} MB for all {len(anatomy.dataset):,} items) in "
                f"{self.where[0]}; "
                "the first pass pays the full cost and writes the cache"
                + (
                    "; later passes give the same samples"
                    if unchanged
                    else "; CAUTION: a cached item differed from yours"
                )
            ),
            "alters_output": not unchanged,
            "prefix": self.prefix_label(anatomy),
            "placement": self.where[0],
            "bytes_per_item": int(per_item),
            "cache_bytes_all_items": int(full),
            "items_cached": cached,
        }

    # -- the diff --------------------------------------------------------------------------

    def patch(self, anatomy: Anatomy, pipeline: Any) -> Patch:
        k = anatomy.first_random
        owner_path = anatomy.compose_path[:-1]
        attr = anatomy.compose_path[-1]
        owner = get_path(anatomy.dataset, owner_path)
        words = (
            f"In {type(owner).__name__}.__getitem__, look the index up in a cache "
            "shared by the workers "
            f"(files in {self.where[1]}) before reading and decoding; on a miss, compute "
            f"{self.prefix_label(anatomy)} and store it; then run only the transforms from "
            f"{anatomy.names[k] if k < len(anatomy.names) else 'the end'} on."
        )
        found = method_lines(type(owner), "__getitem__")
        if found is None or not isinstance(attr, str):
            return Patch(None, words, False, "the source of __getitem__ could not be read")
        source, start, end = found
        lines = source.lines
        call = re.compile(rf"^(\s*)(\w+)\s*=\s*self\.{re.escape(attr)}\((\w+)\)\s*$")
        at = next(
            (
                i
                for i in range(start, end)
                if (m := call.match(lines[i].rstrip("\n"))) and m.group(2) == m.group(3)
            ),
            None,
        )
        if at is None:
            return Patch(None, words, False, f"no line `x = self.{attr}(x)` in __getitem__")
        var = call.match(lines[at].rstrip("\n")).group(2)  # type: ignore[union-attr]
        assign = re.compile(rf"^(\s*){re.escape(var)}\s*=(?!=)")
        block = [i for i in range(start, at) if assign.match(lines[i]) and is_statement(lines[i])]
        if not block:
            return Patch(None, words, False, f"no assignment to `{var}` before the transform call")
        # The last run of consecutive assignments to the variable: what produces the transforms'
        # input.
        run = [block[-1]]
        while run[0] - 1 in block:
            run.insert(0, run[0] - 1)
        indent = assign.match(lines[run[0]]).group(1)  # type: ignore[union-attr]
        if any(not lines[i].startswith(indent) or lines[i][len(indent)] == " " for i in run):
            return Patch(
                None, words, False, "the statements that produce the transforms' input are nested"
            )
        index = list(_parameters(type(owner)))[1:2]
        if not index:
            return Patch(None, words, False, "__getitem__ takes no index parameter")
        idx = index[0]
        store = f"_run_stages(self.{attr}.transforms[:{k}], {var})" if k else var
        new = list(lines)
        body = [f"{indent}{var} = _PREFIX_CACHE.get({idx})\n", f"{indent}if {var} is None:\n"]
        body += ["    " + lines[i] for i in run]
        body.append(f"{indent}    {var} = _PREFIX_CACHE.put({idx}, {store})\n")
        if k:
            ci = call.match(lines[at].rstrip("\n")).group(1)  # type: ignore[union-attr]
            new[at] = f"{ci}{var} = _run_stages(self.{attr}.transforms[{k}:], {var})\n"
        new[run[0] : run[-1] + 1] = body
        folder = os.path.join(
            self.where[1], f"{source.module.__name__.replace('.', '-')}-prefix-cache"
        )
        helpers = (
            PREFIX_CACHE_SOURCE.strip()
            + (
                "\n\n\ndef _run_stages(stages, value):\n    for stage in stages:\n     "
                "   value = stage(value)\n    return value\n"
                if k
                else "\n"
            )
            + f"\n\n_PREFIX_CACHE = SharedPrefixCache({folder!r})\n"
        )
        text = "".join(new) + helper_block(
            f"cache of the deterministic prefix ({self.prefix_label(anatomy)})", helpers
        )
        folder = tempfile.mkdtemp(prefix="stallscope-verify-")
        try:
            return verified_patch(
                source,
                text,
                words,
                lambda module: self._verify(anatomy, pipeline, module, owner_path, folder),
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _verify(
        self,
        anatomy: Anatomy,
        pipeline: Any,
        module: Any,
        owner_path: tuple[Any, ...],
        folder: str,
    ) -> str | None:
        owner = get_path(anatomy.dataset, owner_path)
        patched = patched_class(module, type(owner).__name__)
        module._PREFIX_CACHE.folder = folder

        def make() -> tuple[Any, None]:
            clone = fresh_instance(owner, patched)
            return replace_transforms(
                anatomy.dataset, {owner_path: clone}
            ) if owner_path else clone, None

        # First pass fills the cache, second pass reads it: both must give the user's batches.
        for _ in range(2):
            why = run_two_batches(make, anatomy, pipeline, tolerance=0.0)
            if why:
                return why
        if not os.listdir(folder):
            return "the patched code wrote nothing to its cache"
        return None


def fresh_instance(obj: Any, cls: type) -> Any:
    """A shallow copy of ``obj`` whose class is ``cls`` (the patched class of the same name)."""
    clone = shallow_copy(obj)
    clone.__class__ = cls
    return clone


def _parameters(cls: type) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(cls.__getitem__).parameters)  # type: ignore[index]
    except (TypeError, ValueError):
        return []
