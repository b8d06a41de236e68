"""One verdict per run (issue 25): what every surface says first, decided once from the record.

NOTE [one verdict]
A run measures one config in several ways (the sweep's repeats, the tuner's scan, the final
race's paired rounds, the code-change race), and each measurement had its own judge: the sweep's
fastest, the tuner's pick, "keep yours", the ceiling. :func:`decide` is the only place that
decides; console, Markdown, HTML, JSON (its ``analysis`` block) and ``report`` print its
:class:`RunVerdict` and put the evidence after it. The rules, in order:

* the config: the report's one winner (``sections.best_configuration``): the tuner's pick unless
  the sweep measured a config faster beyond the noise that never raced it, and the user's own
  loader whenever the gain does not clear the noise (``tune_rules.keeps_yours``, the same rule
  for ``tune`` and ``doctor``). A config that loses or ties the race is never the winner, and the
  sweep's fastest row is "fastest in the sweep", never "best";
* one rate for it, with the measurement it comes from (the race's median over its paired rounds,
  or the sweep's median over its repeats), and the gain over the user's loader from the same
  measurement;
* figures that cannot be true are caught first (NOTE [invariants]) and said as bugs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..record.model import Best, baseline_of, best_of, search_of
from ..text import plural
from .ceiling import AT_CEILING, ceiling_facts
from .code_changes import code_change_facts
from .facts import TARGETS, Recommendation, TuningFacts
from .invariants import (
    Problem,
    batch_size_ran,
    checked_confidence,
    ran_label,
    sample_unit,
    true_label,
    users_config,
)
from .plateau import plateau
from .readers import (
    Record,
    as_record_dict,
    batch_size_of,
    config_label,
    mapping,
    number,
    same_config,
    steady_config,
)
from .recommendation_rules import recommendations
from .sections import best_configuration, stage_facts, training_facts, tuning_facts
from .sweep_epochs import best_result, sweep_epochs
from .tune_rules import EpochRule, baseline_failure, epoch_rule


@dataclass
class RunVerdict:
    """What a run says, once: the config to use, its one rate, how sure, what bounds it, what
    buys more, and what was not measured."""

    action: str  # "switch" | "keep-yours" | "measured" (a sweep's fastest, no race) | "none"
    label: str | None = None  # the config that ran, as it ran (NOTE [invariants])
    config: dict[str, Any] | None = None
    samples_per_s: float | None = None
    measurement: str | None = None  # which measurement the rate is
    # Where the rate per epoch decided (NOTE [per-epoch rate] in tuning/epoch_cost.py): the
    # sentence that says so; the rates and the gain above are then per epoch.
    decided_by: str | None = None
    baseline_label: str | None = None
    baseline_samples_per_s: float | None = None
    # Rounds the user's loader raced the pick (None: not a tuner's race); 0: its rate is the
    # tuner's single measurement, taken outside the race.
    baseline_rounds: int | None = None
    gain: float | None = None  # over the user's loader (or one process), same measurement
    gain_interval: list[float] | None = None
    confidence: float | None = None
    rounds: int | None = None
    tied_with: str | None = None  # a raced config within the noise of the winner
    tied_ratio: float | None = None  # its rate over the winner's, paired by round
    tied_interval: list[float] | None = None  # 90% interval of that ratio
    # Configs within this run's noise of the winner (NOTE [plateau]): each label, its rate over
    # the winner's, whether it raced; and that noise (a fraction).
    within_noise: list[tuple[str, float, bool]] = field(default_factory=list)
    noise_band: float | None = None
    # Never raced, measured faster than the winner beyond that noise: each label and rate ratio.
    faster_not_raced: list[tuple[str, float]] = field(default_factory=list)
    best_found: str | None = None  # keep-yours: the fastest config found, within the noise
    best_found_samples_per_s: float | None = None
    within_pct: float | None = None
    fastest_in_sweep: str | None = None  # when the sweep's fastest is not the winner
    fastest_in_sweep_note: str | None = None
    overruled: str | None = None  # the tuner's pick set aside for an unraced faster sweep row
    sample_unit: str | None = None  # images, tokens, sequences; None where the batch does not say
    bound: str | None = None
    ceiling_samples_per_s: float | None = None
    ceiling_share: float | None = None
    ceiling_basis: str | None = None
    buys_more: dict[str, Any] | None = None  # the best measured code change beyond the noise
    recommendations: list[Recommendation] = field(default_factory=list)
    not_measured: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    problems: list[Problem] = field(default_factory=list)
    source: str | None = None  # tune | bench

    @property
    def unit(self) -> str:
        return self.sample_unit or "samples"

    def names(self, config: dict[str, Any] | None) -> bool:
        """Whether ``config`` is the verdict's config (persistent_workers aside, which an
        epoch-boundary measurement may add to the config that raced)."""
        return (
            self.config is not None
            and config is not None
            and same_config(steady_config(config), steady_config(self.config))
        )

    def _nested(self, block: str, *keys: str, present: str) -> dict[str, Any] | None:
        """The fields ``{block}_{key}`` as one block keyed by ``key``; None where the field
        ``{block}_{present}`` is (a baseline without its label, a ceiling without its share)."""
        if getattr(self, f"{block}_{present}") is None:
            return None
        return {key: getattr(self, f"{block}_{key}") for key in keys}

    def to_dict(self) -> dict[str, Any]:
        """The record's derived ``analysis`` block (SPEC §5): ignored on load, recomputed by
        ``report``."""
        out = {
            "action": self.action,
            "config": self.config,
            "label": self.label,
            "samples_per_s": self.samples_per_s,
            "measurement": self.measurement,
            "sample_unit": self.sample_unit,
            "baseline": self._nested(
                "baseline", "label", "samples_per_s", "rounds", present="label"
            ),
            "gain": self.gain,
            "gain_interval": self.gain_interval,
            "confidence": self.confidence,
            "rounds": self.rounds,
            "tied_with": self.tied_with,
            "within_noise": None
            if not self.within_noise
            else {
                "band": self.noise_band,
                "configs": [
                    {"label": label, "ratio": ratio, "raced": raced}
                    for label, ratio, raced in self.within_noise
                ],
            },
            "faster_not_raced": [
                {"label": label, "ratio": ratio} for label, ratio in self.faster_not_raced
            ]
            or None,
            "fastest_in_sweep": self.fastest_in_sweep,
            "bound": self.bound,
            "ceiling": self._nested("ceiling", "samples_per_s", "share", "basis", present="share"),
            "buys_more": self.buys_more,
            "recommendations": [
                {k: v for k, v in asdict(rec).items() if v not in (None, {}, "")}
                for rec in self.recommendations
            ],
            "not_measured": [{"what": what, "why": why} for what, why in self.not_measured],
            "problems": [p.to_dict() for p in self.problems],
        }
        if self.decided_by is not None:  # only where the rate per epoch decided
            out["decided_by"] = self.decided_by
        return out


def decide(record: Any) -> RunVerdict:
    """The run's one verdict (NOTE [one verdict]), from a RunRecord or its dict."""
    r = as_record_dict(record)
    v = _winner(r)
    v.sample_unit = sample_unit(r)
    _ceiling(r, v)
    _buys_more(r, v)
    v.bound = _bound(r, v)
    v.recommendations = recommendations(r)
    v.not_measured += _not_measured(r)
    return v


def _winner(r: Record) -> RunVerdict:
    best = best_configuration(r)
    if best is None:
        return RunVerdict("none")
    tuning = tuning_facts(r)
    problems: list[Problem] = []

    def label(config: dict[str, Any], text: str) -> str:
        """The config that ran (the sections' labels already are): a batch size the batches
        contradicted is said as the bug it was, once."""
        fixed, problem = true_label(r, config, text, baseline=users_config(r))
        ran, said = batch_size_ran(r, config), batch_size_of(config)
        if problem is None and ran is not None and f"bs={ran}" in fixed.split():
            problem = Problem(
                f"the label of {fixed}",
                f"said bs={said}, but its batches held {ran} each",
                "relabelled",
            )
        if problem is not None and all(p.figure != problem.figure for p in problems):
            problems.append(problem)
        return fixed

    v = RunVerdict("measured", source=best.source, config=best.config)
    v.label = label(best.config, best.label)
    v.samples_per_s = best.samples_per_s
    if best.baseline is not None:
        v.baseline_label = label(best.baseline.config, best.baseline.label)
        v.baseline_samples_per_s = best.baseline.samples_per_s
    if best.source == "tune" and tuning is not None:
        rounds = tuning.rounds
        v.rounds = rounds
        if rounds:
            v.measurement = f"the tuner's race, median of {plural(rounds, 'paired round')}"
        elif rounds == 0:
            v.measurement = "the tuner's single measurements; its final race ran no round"
        else:
            v.measurement = "the tuner's measurements"
        best_entry = best_of(r) or Best()
        base = next((h for h in tuning.head_to_head if h.role == "baseline"), None)
        v.baseline_rounds = (base.rounds or 0) if base is not None else 0
        v.confidence, problem = checked_confidence(best_entry.confidence, rounds)
        if problem is not None:
            problems.append(problem)
        rule = epoch_rule(r)
        if best.keep_baseline:
            v.action = "keep-yours"
            found = best.best_found or tuning.best
            v.best_found = label(found.config, found.label)
            v.best_found_samples_per_s = found.samples_per_s
            v.within_pct = best.within_pct
        else:
            v.action = "switch"
            v.gain = best.speedup
            _tie(r, tuning, v)
            _gain_interval(r, best_entry, tuning, v)
            near = plateau(r) if rule is None else None  # per epoch: not comparable
            if near is not None:  # a tie has its own sentence
                v.within_noise = [c for c in near.configs if c[0] != v.tied_with]
                v.faster_not_raced = list(near.beyond)
                v.noise_band = near.band if v.within_noise or v.faster_not_raced else None
        if rule is not None:
            _per_epoch(v, rule, best, found.config if best.keep_baseline else None)
    else:
        repeats = best.result.repeats if best.result else None
        v.measurement = (
            f"the sweep, median of {plural(repeats, 'repeat')}" if repeats else "the sweep"
        )
        epochs = sweep_epochs(r)
        if epochs is not None:  # the rates above are per epoch (best_configuration)
            v.decided_by = epochs.sentence(
                lambda res: label(res.config, ran_label(r, res.config, res.label))
            )
            v.measurement = f"per epoch, start-ups included: {v.measurement}"
        v.gain = best.speedup
        good, _ = TARGETS["tuning_headroom"]
        if best.overruled is not None:
            v.overruled = label(best.overruled.config, best.overruled.label)
            v.action = "switch"
        elif best.speedup is not None and best.speedup >= good:
            v.action = "switch"
        v.not_measured.append(
            (
                "a confidence",
                "the sweep measured each config on its own, not in paired rounds"
                + (" against the tuner's pick" if best.overruled is not None else ""),
            )
        )
    _fastest_in_sweep(r, v, label)
    v.problems = problems
    return v


def _per_epoch(v: RunVerdict, rule: EpochRule, best: Any, found: Any) -> None:
    """The per-epoch rate decided (NOTE [per-epoch rate]): the verdict's rates and gain are the
    race's per-epoch ones, and it says so; the steady-state figures stay in the tuner's tables."""
    v.decided_by = rule.sentence
    v.measurement = f"per epoch, start-ups included: {v.measurement}"
    v.samples_per_s = rule.rate_of(best.config) or v.samples_per_s
    if rule.baseline_samples_per_s is not None:
        v.baseline_samples_per_s = rule.baseline_samples_per_s
    if v.action == "keep-yours":
        v.best_found_samples_per_s = rule.rate_of(found) or v.best_found_samples_per_s
        return
    if rule.speedup is not None:
        v.gain = rule.speedup


def _tie(r: Record, tuning: TuningFacts, v: RunVerdict) -> None:
    """A raced config within the noise of the winner: named once, with its ratio to the winner."""
    if not tuning.tie or not tuning.runner_up:
        return
    v.tied_with = tuning.runner_up  # relabelled as it ran (tuning_facts)
    best = best_of(r) or Best()
    if best.margin:
        v.tied_ratio = round(1 / best.margin, 4)
    interval = _interval(best.margin_interval)
    if interval is not None:
        v.tied_interval = [round(1 / interval[1], 4), round(1 / interval[0], 4)]


def _interval(value: tuple[float, ...] | None) -> tuple[float, float] | None:
    """A recorded ``[low, high]`` interval, low first; None where the record has none."""
    if value is not None and len(value) == 2 and all(value):
        lo, hi = sorted(float(x) for x in value)
        return lo, hi
    return None


def _gain_interval(r: Record, best: Best, tuning: TuningFacts, v: RunVerdict) -> None:
    """The gain's interval: the pick over the user's loader, paired by round (the race records it
    from two paired rounds on); else why there is none."""
    interval = _interval(best.gain_interval)
    if interval is not None:
        lo, hi = interval
        if v.gain is None or lo <= v.gain <= hi:
            v.gain_interval = [round(lo, 4), round(hi, 4)]
            return
        # The gain is a ratio of medians, the interval one of paired rounds: when they part, the
        # rounds disagree with themselves and neither reading is stated as a range.
        v.not_measured.append(
            (
                "an interval for the gain",
                f"the paired rounds' interval ({lo:.2f}–{hi:.2f}×) does not hold the ratio of "
                f"the medians ({v.gain:.2f}×): the rounds disagree, so no range is stated",
            )
        )
        return
    base = next((h for h in tuning.head_to_head if h.role == "baseline"), None)
    rounds = base.rounds if base is not None else None
    if rounds is not None and rounds < 2:
        left = ""
        if base is not None and (tuning.rounds or 0) > rounds:
            budget = any(s.label == base.label and "budget" in str(s.why) for s in best.skipped)
            left = (
                " before the time budget left it out"
                if budget
                else (" before it left the race, too far behind to race on")
            )
        why = (
            f"your loader raced the pick in {plural(rounds, 'round')}{left}; an interval needs two "
            "paired rounds or more"
        )
    elif base is None:
        baseline = baseline_of(r)
        label = baseline.label if baseline is not None else None
        left_out = any(s.label == label and "budget" in str(s.why) for s in best.skipped)
        failed = baseline_failure(r)
        why = "your loader did not race the pick: " + (
            f"it gave no rate here ({failed.rstrip('.')})"
            if failed is not None
            else "the time budget left it out of the race"
            if left_out
            else "its single measurement was too far behind to enter the race"
        )
    else:
        why = "the race recorded no per-round ratio of the pick to your loader"
    v.not_measured.append(("an interval for the gain", why))


def _fastest_in_sweep(r: Record, v: RunVerdict, label: Any) -> None:
    sweep = best_result(r)
    if sweep is None or v.config is None:
        return
    steady = steady_config(sweep.config)
    mine = steady_config(v.config)
    if steady == mine:
        return
    name = label(sweep.config, config_label(sweep.config, sweep.label))
    v.fastest_in_sweep = name
    tuning = tuning_facts(r)
    raced = next(
        (h for h in (tuning.head_to_head if tuning else []) if steady_config(h.config) == steady),
        None,
    )
    if v.overruled is not None:
        v.fastest_in_sweep_note = "the winner"
    elif raced is not None:
        v.fastest_in_sweep_note = (
            "within the noise of the winner in the race"
            if v.tied_with == raced.label or v.action == "keep-yours"
            else "slower than the winner in the race"
        )
    else:
        v.fastest_in_sweep_note = "not faster beyond the noise, and not raced"


def _ceiling(r: Record, v: RunVerdict) -> None:
    facts = ceiling_facts(r)
    if facts is None:
        return
    if facts.problem is not None:
        v.problems.append(facts.problem)
    c = facts.ceiling
    if c is None:
        if facts.problem is not None:
            v.not_measured.append(
                ("the ceiling", "the figure broke an invariant and was left out (see above)")
            )
        return
    v.ceiling_samples_per_s = number(c.get("samples_per_s"))
    v.ceiling_share = number(c.get("pick_fraction"))
    v.ceiling_basis = str(c.get("basis") or "") or None


def _buys_more(r: Record, v: RunVerdict) -> None:
    facts = code_change_facts(r)
    if facts is None:
        return
    best = facts.best
    if best is not None:
        v.buys_more = {
            "id": best.id,
            "title": best.title,
            "speedup": best.speedup,
            "rounds": best.rounds,
            "against": facts.pick_label,
        }
    for title, why in facts.not_applied:
        v.not_measured.append((title, why))


def _bound(r: Record, v: RunVerdict) -> str | None:
    """What bounds the pipeline, from the strongest evidence the record holds."""
    training = training_facts(r)
    if training is not None and training.verdict:
        return f"the training loop is {training.verdict} (its measured data-wait share)"
    if v.ceiling_share is not None and v.ceiling_share >= AT_CEILING:
        return {
            "main-process": "the main process receiving batches, near this machine's ceiling",
            "one-process": "one process's CPU (receiving from workers costs more), near its "
            "ceiling",
            "saturated": "this machine's CPU: the pick keeps every usable core busy",
        }.get(v.ceiling_basis or "", "this machine's CPU, near its ceiling")
    region = search_of(r).region
    if region is not None and region.name is not None:
        return f"{region.name} (the tuner's reading of the fetch)"
    stages = stage_facts(r)
    if stages is not None and stages.top is not None:
        return f"the {stages.top.name} stage, the largest measured"
    return None


def _not_measured(r: Record) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in r.get("not_run") or []:
        if isinstance(item, dict):
            out.append((str(item.get("step", "?")), str(item.get("why", "")).rstrip(".")))
    for item in r.get("step_failures") or []:
        if isinstance(item, dict):
            out.append(
                (
                    str(item.get("step", "?")),
                    "it failed: " + str(item.get("message", "")).rstrip("."),
                )
            )
    cost = mapping(r.get("cpu_cost"))
    if cost.get("error"):
        out.append(("the ceiling", str(cost["error"]).rstrip(".")))
    return out


__all__ = ["RunVerdict", "decide"]
