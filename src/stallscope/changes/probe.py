"""``code_changes``: apply each applicable change inside the probes, race it against the best knob
config, and return the record sections ``code_changes`` and ``code_changes_run``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..errors import describe_exception
from ..runtime.processes import no_orphans
from ..target import Pipeline
from .anatomy import Anatomy, NotApplicable, examine
from .base import Applied, Change, Patch
from .batch_augment import BatchAugmentation
from .decoders import FasterDecode
from .inline import InlineAnatomy, examine_inline
from .inline_changes import InlineIntegerTransfer, InlinePrefixCache, InlineReducedDecode, NotMoved
from .integer_transfer import IntegerTransfer
from .prefix_cache import PrefixCache
from .race import PICK, Entrant, fill, race_pipeline, run_race, speedup, speedup_interval
from .reduced_decode import ReducedDecode

DEFAULT_BUDGET_S = 30.0
# Share of the budget the cache's first pass may take (it sets how many items the race uses).
FILL_SHARE = 0.2
MAX_ROUNDS = 3


def all_changes() -> list[Change]:
    return [PrefixCache(), ReducedDecode(), IntegerTransfer(), BatchAugmentation()]


def inline_changes(ids: list[str] | None = None) -> list[Change]:
    every: list[Change] = [
        InlinePrefixCache(),
        InlineReducedDecode(),
        InlineIntegerTransfer(),
        NotMoved(
            "batch-augment",
            "Batch-level augmentation",
            "no transform list: {name}.__getitem__ does its work in statements, and this change "
            "moves tensor stages of a transform list only",
        ),
        FasterDecode(),
    ]
    return every if ids is None else [c for c in every if c.id in ids]


@dataclass
class ChangesResult:
    changes: list[dict[str, Any]] = field(default_factory=list)
    not_applied: list[dict[str, str]] = field(default_factory=list)
    pick: dict[str, Any] | None = None
    items: int = 0
    rounds: int = 0
    seconds: float = 0.0
    budget_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code_changes": list(self.changes),
            "code_changes_run": {
                "pick": self.pick,
                "items": self.items,
                "rounds": self.rounds,
                "seconds": round(self.seconds, 2),
                "budget_s": self.budget_s,
                "not_applied": list(self.not_applied),
                "notes": list(self.notes),
            },
        }


def code_changes(
    pipeline: Pipeline,
    pick: LoaderConfig | None = None,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    changes: list[Change] | None = None,
    max_rounds: int = MAX_ROUNDS,
    window_s: float = 0.6,
    progress: Callable[[str, float | None], None] | None = None,
) -> ChangesResult:
    """Apply, verify and race every applicable change on ``pipeline`` with ``pick`` (default: the
    user's own config) within about ``budget_s`` seconds."""
    started = time.perf_counter()
    deadline = started + budget_s
    config = (pick or pipeline.baseline).replace(batch_size=pipeline.batch_size)
    pick_section: dict[str, Any] = {"config": config.to_dict(), "label": config.label()}
    result = ChangesResult(budget_s=budget_s, pick=pick_section)
    if pick is None:
        result.notes.append("raced against the user's own config: no tuned pick in this run")
    say = progress or _silent
    chosen = changes is not None
    changes = all_changes() if changes is None else changes
    anatomy: Any
    try:
        _wrappable(pipeline)
    except NotApplicable as exc:
        result.not_applied = [{"id": c.id, "title": c.title, "why": str(exc)} for c in changes]
        result.seconds = time.perf_counter() - started
        return result
    try:
        anatomy = _anatomy(pipeline)
    except NotApplicable as exc:
        try:  # no transform list: the work is inline in __getitem__ (NOTE [inline prefix])
            anatomy = _inline_anatomy(pipeline)
        except NotApplicable as inline:
            why = f"{exc}, and in __getitem__ {inline}" if str(inline) != str(exc) else str(exc)
            result.not_applied = [{"id": c.id, "title": c.title, "why": why} for c in changes]
            result.seconds = time.perf_counter() - started
            return result
        changes = inline_changes([c.id for c in changes] if chosen else None)
        result.notes.append(
            f"no transform list: the changes were found in {anatomy.cls.__name__}.__getitem__ "
            f"({anatomy.source.path.name}); the first random draw is at "
            f"{anatomy.first_random_text()}"
        )
    length = len(anatomy.dataset)
    workers = max(1, config.num_workers)
    items = int(FILL_SHARE * budget_s * workers / max(anatomy.seconds_per_sample, 1e-6))
    items = max(min(length, 4 * pipeline.batch_size), min(length, items))
    result.items = items
    if items < length:
        result.notes.append(
            f"raced on the first {items:,} of {length:,} items (the budget), the same "
            "items for every entrant"
        )
    applied: list[Prepared] = []
    try:
        with no_orphans():
            for n, change in enumerate(changes):
                say(f"{change.title}: applying", 0.4 * n / len(changes))
                prepared = _prepare(change, anatomy, pipeline, config, items, result)
                if prepared is not None:
                    applied.append(prepared)
            entrants = [Entrant(PICK, race_pipeline(pipeline, anatomy.dataset, items))]
            entrants += [p.entrant for p in applied]
            say("racing the changes against the best knob config", 0.5)
            result.rounds = run_race(
                entrants,
                config,
                deadline=deadline,
                max_rounds=max_rounds,
                window_s=window_s,
                on_measure=lambda who, r: say(f"round {r}: {who}", None),
            )
        if result.rounds < 2:
            result.notes.append(
                f"{result.rounds} interleaved round(s) fitted the budget of {budget_s:g} s; "
                "a second round would give the speed-ups a check against noise"
            )
        pick_entrant = entrants[0]
        pick_section["samples_per_s"] = _median(pick_entrant.rates)
        for prepared in applied:
            result.changes.append(_entry(prepared, pick_entrant))
    finally:
        for prepared in applied:
            if prepared.applied.cleanup is not None:
                prepared.applied.cleanup()
    result.changes.sort(key=lambda c: -(c["speedup"] or 0.0))
    result.seconds = time.perf_counter() - started
    if result.seconds > 1.1 * budget_s:  # one round always runs: a speed-up needs one
        result.notes.append(
            f"the step took {result.seconds:.0f} s of its {budget_s:g} s budget: one interleaved "
            "round of every applicable change is the least that gives a speed-up"
        )
    return result


def _silent(text: str, fraction: float | None = None) -> None:
    """Progress nobody listens to."""


def _wrappable(pipeline: Pipeline) -> None:
    if not pipeline.kind.rebuilds_from_parts:
        why = (
            "its trials call the factory, which builds its own dataset: a changed one cannot be "
            "put in"
            if pipeline.kind.name == "factory"
            else "it has no Dataset stallscope can wrap"
        )
        raise NotApplicable(f"{pipeline.kind.description}: {why}")
    if pipeline.batch_sampler is not None:
        raise NotApplicable(
            "the loader's batch_sampler decides its batches; the race needs plain batches"
        )
    if pipeline.is_iterable:
        raise NotApplicable("the dataset is iterable; the changes need items by index")


def _anatomy(pipeline: Pipeline) -> Anatomy:
    try:
        return examine(pipeline.dataset)
    except NotApplicable:
        raise
    except Exception as exc:  # a Compose that is not called with the image alone (albumentations)
        raise NotApplicable(
            "the transform pipeline could not be run stage by stage "
            f"({describe_exception(exc, 120)})"
        ) from exc


def _inline_anatomy(pipeline: Pipeline) -> InlineAnatomy:
    try:
        return examine_inline(pipeline.dataset)
    except NotApplicable:
        raise
    except Exception as exc:  # the user's __getitem__ failed under the tracer
        raise NotApplicable(f"running it raised {describe_exception(exc, 120)}") from exc


def _median(values: list[float]) -> float | None:
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return None
    mid = len(finite) // 2
    return round(finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2, 2)


@dataclass
class Prepared:
    change: Change
    applied: Applied
    patch: Patch
    side_effect: dict[str, Any]
    entrant: Entrant


def _prepare(
    change: Change,
    anatomy: Anatomy,
    pipeline: Pipeline,
    config: LoaderConfig,
    items: int,
    result: ChangesResult,
) -> Prepared | None:
    """Apply one change (a cache gets its first pass), measure its side effect and verify its diff;
    None, with the reason in ``result.not_applied``, where it does not apply."""
    done: Applied | None = None
    try:
        why = change.applies(anatomy, pipeline)
        if why:
            result.not_applied.append({"id": change.id, "title": change.title, "why": why})
            return None
        done = change.apply(anatomy, pipeline)
        entrant = Entrant(change.id, race_pipeline(pipeline, done.dataset, items), done.main_step)
        first_pass = None
        if done.fill:
            seconds, seen = fill(entrant.pipeline, config, timeout=30.0)
            first_pass = {
                "seconds": round(seconds, 3),
                "items": seen,
                "samples_per_s": round(seen / seconds, 2) if seconds > 0 else None,
            }
        patch = change.patch(anatomy, pipeline)
        try:
            side = change.side_effect(anatomy, pipeline, done)
        except Exception as exc:
            side = {
                "summary": f"not measured: {describe_exception(exc, 160)}",
                "alters_output": None,
            }
        if first_pass is not None:
            side["first_pass"] = first_pass
    except Exception as exc:  # a probe of ours failed on this pipeline: say so, go on
        if done is not None and done.cleanup is not None:
            done.cleanup()
        result.not_applied.append(
            {
                "id": change.id,
                "title": change.title,
                "why": f"the probe raised {describe_exception(exc, 160)}",
            }
        )
        return None
    return Prepared(change, done, patch, side, entrant)


def _entry(prepared: Prepared, pick: Entrant) -> dict[str, Any]:
    change, patch, entrant, side = (
        prepared.change,
        prepared.patch,
        prepared.entrant,
        dict(prepared.side_effect),
    )
    first_pass = side.get("first_pass")
    rate = _median(pick.rates)
    if first_pass and rate and first_pass.get("samples_per_s"):
        side["summary"] += (
            f"; the first pass ran at {first_pass['samples_per_s']:,.0f} samples/s "
            f"(the pick without the change: {rate:,.0f})"
        )
    ratio = speedup(entrant, pick)
    interval = speedup_interval(entrant, pick) if entrant.error is None else None
    return {
        "id": change.id,
        "title": change.title,
        "speedup": None if ratio is None else round(ratio, 3),
        # 90 % t-interval of the paired round ratios (None below two rounds)
        "speedup_interval": None if interval is None else [round(v, 3) for v in interval],
        # Rounds in which both it and the pick measured a rate: the speed-up's pairs (a round
        # whose window delivered nothing on either side pairs nothing).
        "rounds": sum(
            1 for a, b in zip(entrant.rates, pick.rates) if math.isfinite(a) and math.isfinite(b)
        )
        if entrant.error is None
        else 0,
        "samples_per_s": _median(entrant.rates),
        "pick_samples_per_s": rate,
        "diff": patch.diff,
        "apply": patch.apply,
        "description": patch.description,
        "verified": patch.verified,
        "unverified_reason": patch.reason,
        "side_effect": side,
        "error": entrant.error,
    }
