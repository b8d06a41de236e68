"""What a run cannot show, checked before anything is printed (issue 25).

NOTE [invariants]
Some figures cannot be true whatever the machine did: a pipeline's share of this machine's
ceiling above 100%, a confidence that more rounds than were raced would be needed for, a label
that names a config other than the one that ran. A figure that breaks one is a bug upstream (a
ceiling computed over the wrong batch size, a label made from a knob the loader does not have),
never a measurement: the report says so in one line (:class:`Problem`) and drops the figure, or
recomputes it from what was measured where the record holds that. Each check is a pure function
of the record and the figure; ``verdict.decide`` applies them all before any surface renders.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from ..record.model import (
    BenchResult,
    Best,
    ConfigRate,
    HeadToHead,
    Trial,
    baseline_of,
    best_of,
    results_of,
    trials_of,
)
from ..stats import MIN_ROUNDS
from .readers import (
    Record,
    batch_size_of,
    config_label,
    mapping,
    number,
    ok_results,
    same_config,
)

# NOTE [paired rounds] in tuning/confidence.py: below MIN_ROUNDS interleaved rounds there is no
# confidence, and below CONFIDENT_ROUNDS none above FEW_ROUNDS_CAP. A record that says otherwise
# was not judged by that rule.
CONFIDENT_ROUNDS = 4
FEW_ROUNDS_CAP = 0.9

# A batch holds "another" number of samples than the label says from this factor on: partial last
# batches and a batch sampler's spread stay well inside it; a flat buffer labelled bs=1 does not.
BATCH_SIZE_FACTOR = 2.0


@dataclass
class Problem:
    """An invariant a figure broke: which figure, what it read, and what the report did."""

    figure: str
    found: str
    action: str  # "dropped" | "recomputed" | "relabelled"

    def sentence(self) -> str:
        done = {
            "dropped": "the figure is left out",
            "recomputed": "recomputed from what was measured",
            "relabelled": "labelled from what ran",
        }[self.action]
        return f"Bug caught before printing: {self.figure} {self.found}, which cannot be; {done}."

    def to_dict(self) -> dict[str, str]:
        return {"figure": self.figure, "found": self.found, "action": self.action}


# -- the batch and the sample --------------------------------------------------------------------


def samples_per_batch(r: Record, config: Any = None) -> float | None:
    """Samples a batch held as measured (samples timed ÷ batches timed): at ``config`` where the
    sweep ran it, else the median over the sweep's results; None where nothing was timed."""
    rows = ok_results(r)
    if config is not None:
        own = [res for res in rows if same_config(res.config, config)]
        rows = own or rows
    ratios = [
        res.samples_measured / res.batches_measured
        for res in rows
        if res.samples_measured and res.batches_measured
    ]
    if not ratios:
        cost = mapping(r.get("cpu_cost"))
        samples, batches = number(cost.get("samples")), number(cost.get("batches"))
        return samples / batches if samples and batches else None
    return statistics.median(ratios)


def _variable_batches(r: Record) -> bool:
    dataset = mapping(r.get("dataset"))
    return dataset.get("batching") == "batch_sampler"


def batch_size_ran(r: Record, config: Any) -> int | None:
    """The batch size that ran at ``config`` when it is not the config's ``batch_size`` (a loader
    that batches itself: a flat token buffer labelled bs=1); None when the label is right or the
    batches were not timed."""
    said = batch_size_of(config)
    held = samples_per_batch(r, config)
    if said is None or held is None or _variable_batches(r):
        return None
    if held >= said * BATCH_SIZE_FACTOR or held * BATCH_SIZE_FACTOR <= said:
        return int(round(held))
    return None


_TENSOR = re.compile(r"(?:Tensor|ndarray|array)\[([0-9, ]*)\]\s*(\w+)?")


def sample_unit(r: Record) -> str | None:
    """What one "sample" is, named from the batch where its structure says (images, tokens,
    sequences); None where it does not."""
    dataset = mapping(r.get("dataset"))
    batch, item = str(dataset.get("batch") or ""), str(dataset.get("item") or "")
    if not batch:
        return None
    if any(key in batch for key in ("input_ids", "token_ids", "'tokens'", "tokens=")):
        return "sequences"
    shapes = [
        ([int(d) for d in dims.replace(" ", "").split(",") if d], dtype or "")
        for dims, dtype in _TENSOR.findall(batch)
    ]
    if not shapes:
        return None
    dims, dtype = shapes[0]
    if len(dims) == 1 and "int" in dtype and len(shapes) == 1 and not item.startswith("tuple"):
        # one flat integer buffer per step, no batch dimension: the samples counted are tokens
        return "tokens"
    if len(dims) == 4 and dims[1] in (1, 3, 4):
        return "images"
    if len(dims) == 2 and "int" in dtype:
        return "sequences"
    return None


# -- labels ----------------------------------------------------------------------------------


def factory_name(r: Record) -> str | None:
    """The user's factory (``make_loader``) where the loader kind is one whose knobs are its
    parameters; None for every other kind."""
    kind = r.get("loader_kind") if isinstance(r.get("loader_kind"), dict) else None
    if kind is None:
        dataset = mapping(r.get("dataset"))
        kind = mapping(dataset.get("kind"))
    if kind.get("name") != "factory":
        return None
    loader = mapping(r.get("loader"))
    origin = str(loader.get("origin") or "")
    name = origin.split("(", 1)[0].strip() if origin else ""
    return name or "the target"


def true_label(
    r: Record, config: Any, label: str, *, baseline: Any = None
) -> tuple[str, Problem | None]:
    """``label`` as the config that ran: the factory's own defaults are "yours (make_loader's
    defaults)" (its default may be a thread count the config never held), and a batch size the
    batches contradict is read from the batches."""
    factory = factory_name(r)
    if factory is not None and baseline is not None and same_config(config, baseline):
        return f"yours ({factory}'s defaults)", None
    if factory is not None:
        label = _factory_knobs_only(r, label)
    ran = batch_size_ran(r, config)
    said = batch_size_of(config)
    if ran is None or said is None or f"bs={said}" not in label.split():
        return label, None
    fixed = " ".join(f"bs={ran}" if part == f"bs={said}" else part for part in label.split())
    return fixed, Problem(
        f"the label {label!r}",
        f"says bs={said} while its batches held {ran} samples each",
        "relabelled",
    )


# A label's words and the knob each shows (``LoaderConfig.label``): a factory's config shows only
# the knobs its parameters take; the batch size stays, read from the batches where they say.
_LABEL_WORDS = (
    ("w=", "num_workers"),
    ("threads×", "worker_threads"),
    ("pf=", "prefetch_factor"),
    ("persistent", "persistent_workers"),
    ("unordered", "in_order"),
    ("pin", "pin_memory"),
    ("batched", "batched_fetch"),
    ("torch_threads=", "torch_threads"),
    ("fork", "multiprocessing_context"),
    ("spawn", "multiprocessing_context"),
    ("forkserver", "multiprocessing_context"),
)


def factory_knobs(r: Record) -> set[str] | None:
    """The knobs the user's factory takes (its parameters' config fields); None where the target
    is no factory with knob parameters."""
    parameters = mapping(r.get("loader")).get("factory_parameters")  # parameter -> knob
    if not isinstance(parameters, dict) or not parameters:
        return None
    return {str(knob) for knob in parameters.values()}


def _factory_knobs_only(r: Record, label: str) -> str:
    """``label`` without the knobs the user's factory does not take: a trial's config holds
    DataLoader defaults (``pf=2``) that the factory's call never passed."""
    takes = factory_knobs(r)
    if takes is None:
        return label
    kept = [
        word
        for word in label.split()
        if not any(
            (word == prefix or (prefix.endswith(("=", "×")) and word.startswith(prefix)))
            and knob not in takes
            for prefix, knob in _LABEL_WORDS
        )
    ]
    return " ".join(kept) or label


def users_config(r: Record) -> dict[str, Any] | None:
    """The user's own config: the tuner's baseline, else the knobs of the loader call."""
    baseline = baseline_of(r)
    config = (baseline.config if baseline else None) or mapping(r.get("loader")).get("knobs")
    return config if isinstance(config, dict) else None


def ran_label(r: Record, config: Any, label: Any = None) -> str:
    """The label every table and sentence prints for ``config``: the record's label (or one made
    from the config), as :func:`true_label` makes it the config that ran."""
    text = config_label(config, label)
    return true_label(r, config, text, baseline=users_config(r))[0]


def relabel(r: Record, label: str) -> str:
    """A label stored without its config (a skipped finalist, the ceiling's pick) as the config
    that ran: the entry of the record it names, relabelled; the label as stored where none does."""
    best = best_of(r)
    entries: list[Best | ConfigRate | HeadToHead | BenchResult | Trial] = [
        *([best] if best else []),
        *filter(None, [baseline_of(r)]),
        *(best.head_to_head if best else ()),
        *results_of(r),
        *trials_of(r),
    ]
    for entry in entries:
        if not entry.has("config"):
            continue
        if config_label(entry.config, entry.label) == label:
            return ran_label(r, entry.config, entry.label)
    return label


# -- figures ---------------------------------------------------------------------------------


def checked_confidence(confidence: Any, rounds: int | None) -> tuple[float | None, Problem | None]:
    """The confidence when the rounds support it (NOTE [paired rounds]), else None and why."""
    value = number(confidence)
    if value is None:
        return None, None
    n = rounds or 0
    if not 0.0 <= value <= 1.0:
        found = f"reads {value:.0%}"
    elif n < MIN_ROUNDS:
        found = f"reads {value:.0%} from {n} interleaved round(s)"
    elif n < CONFIDENT_ROUNDS and value > FEW_ROUNDS_CAP + 1e-9:
        found = f"reads {value:.0%} from {n} interleaved rounds (at most {FEW_ROUNDS_CAP:.0%})"
    else:
        return value, None
    return None, Problem("the confidence", found, "dropped")


def ceiling_bound(
    cpu_rate: float, main_rate: float | None, one_process: float | None, pick: float
) -> tuple[float, str]:
    """The ceiling and its basis (NOTE [ceiling] in ceiling.py): with workers, the lower of the
    cores' and the main process's limits; one process making every sample itself where that is
    higher; and the cores' limit where the pick outran the one-process figure (measured at one
    intra-op thread, which a loader with more may pass)."""
    rate, basis = (
        (main_rate, "main-process") if main_rate and main_rate < cpu_rate else (cpu_rate, "cpu")
    )
    if one_process and one_process > rate:
        rate, basis = (one_process, "one-process") if pick <= one_process else (cpu_rate, "cpu")
    return rate, basis


def checked_ceiling(
    r: Record, ceiling: dict[str, Any]
) -> tuple[dict[str, Any] | None, Problem | None]:
    """The ceiling when the pick's share of it is at most 100%; else recomputed over the batch
    size that ran (the main process's limit is per batch), else None; the problem says which."""
    fraction = number(ceiling.get("pick_fraction"))
    pick = number(ceiling.get("pick_samples_per_s"))
    if fraction is None or pick is None or fraction <= 1.0:
        return ceiling, None
    figure, found = "the pick's share of this machine's ceiling", f"reads {fraction:.1%}"
    held = samples_per_batch(r)
    main_ms = number(ceiling.get("main_ms_per_batch"))
    cpu_rate = number(ceiling.get("cpu_samples_per_s"))
    main_rate = held / (main_ms / 1000.0) if held and main_ms else None
    if cpu_rate or main_rate:
        rate, basis = ceiling_bound(
            cpu_rate or math.inf, main_rate, number(ceiling.get("one_process_samples_per_s")), pick
        )
        if math.isfinite(rate) and pick / rate <= 1.0:
            fixed = dict(ceiling)
            fixed.update(
                samples_per_s=round(rate, 2),
                basis=basis,
                pick_fraction=round(pick / rate, 4),
                batch_size=(round(held) if abs(held - round(held)) < 0.05 else round(held, 1))
                if held
                else ceiling.get("batch_size"),
                main_process_samples_per_s=round(held / (main_ms / 1000.0), 2)
                if held and main_ms
                else None,
            )
            return fixed, Problem(figure, found, "recomputed")
    return None, Problem(figure, found, "dropped")
