"""Recommendations from a tune section (pure: record section → list), each with what was measured.

One verdict per report (issue 10): either the tuned settings, with the
interleaved rounds and confidence behind them, or "keep yours" when the best
found is within noise of the user's own loader; then nothing else that would
change the loader's steady state is recommended either. ``persistent_workers``
is recommended only on its measured epoch-boundary gap (``recommendation_rules``).
The tuner records measurements only; these rules read them, in a saved record too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..record.model import Best, ConfigRate, Trial, baseline_of, best_of, search_of, trials_of
from ..text import plural
from ..thresholds import TIE_MARGIN
from .invariants import ran_label
from .readers import config_label, mapping, number, steady_config

# A knob effect seen only in single scan measurements (never raced) counts from this gain on, and
# so does a gain from more workers than cores: 5%, above the tie margin, because one measurement
# per config carries the whole noise of a run instead of a paired ratio's.
SCAN_MIN_GAIN = 0.05

_KNOB_ADVICE = {
    "batched_fetch": (
        "batched-fetch",
        "Fetch whole batches instead of single items",
        "Per-item __getitem__ calls and the collate dominate for this in-memory dataset. Give the "
        "dataset a __getitems__(indices) that indexes its arrays once per batch (for tensors: "
        "t.index_select(0, torch.as_tensor(indices)), which stays off the intra-op thread pool), "
        "or build the loader with ss.make_loader(..., config) where the config has "
        "batched_fetch: true.",
    ),
    "in_order": (
        "in-order-false",
        "Let batches arrive out of order (in_order=False)",
        "Fetch times are jittery: with in_order=True one slow batch holds back every batch behind "
        "it. in_order=False (torch >= 2.6) lets the other workers' batches through; sample order "
        "within an epoch then varies between runs.",
    ),
    "torch_threads": (
        "intra-op-threads",
        "Cap the main process's intra-op threads",
        "Loading runs in the main process here; its torch ops contend with torch's own thread "
        "pool. Call torch.set_num_threads(n) with the measured n before building the loader.",
    ),
}


def _label(entry: Best | ConfigRate | Trial) -> str:
    """A best/baseline/trial entry's label (from its config in records that lack one)."""
    return config_label(entry.config, entry.label)


def _best(best: Best | Mapping[str, Any] | None) -> Best:
    """The pick as read (callers may hold the record's dict)."""
    return Best.of(best) or Best()


def _baseline(baseline: ConfigRate | Mapping[str, Any] | None) -> ConfigRate:
    return ConfigRate.of(baseline) or ConfigRate()


def _rate(entry: Best | ConfigRate) -> float:
    return entry.samples_per_s or 0.0


def tie_pct(best: Best | Mapping[str, Any]) -> str:
    """The tie margin as a percentage (today's margin in records from before it was stored)."""
    margin = _best(best).tie_margin
    return f"{(margin if margin is not None else TIE_MARGIN):.0%}"


TIE_SENTENCE = "a tie within noise; the cheaper config was kept"


def how_sure(best: Best | Mapping[str, Any]) -> str:
    """The confidence behind a pick, or why there is none ("not confirmed"); a tie says so."""
    best = _best(best)
    rounds = best.rounds or 0
    confidence = best.confidence
    tie = f"; {TIE_SENTENCE} (within {tie_pct(best)})" if best.tie else ""
    if confidence is None:
        return f"not confirmed: the budget ran out after {rounds} interleaved round(s)" + tie
    return (
        f"confidence {confidence:.0%} that no other finalist is more than {tie_pct(best)} faster "
        f"({rounds} interleaved rounds){tie}"
    )


def keep_yours_sentence(
    best: Best | Mapping[str, Any],
    baseline: ConfigRate | Mapping[str, Any],
    floor: float | None = None,
    rule: EpochRule | None = None,
) -> str:
    """Why no change is recommended; per epoch where that rate decided (``rule``)."""
    best, baseline = _best(best), _baseline(baseline)
    rate, base = _rate(best), _rate(baseline)
    unit = "samples/s"
    if rule is not None:
        mine, yours = rule.rate_of(best.config), rule.rate_of(baseline.config)
        if mine and yours:
            rate, base, unit = mine, yours, "samples/s per epoch, start-ups included"
    within = best.within_pct
    if within is None:
        within = max(0.0, (1 - base / rate) * 100) if rate > 0 else 0.0
    if best.config == baseline.config:
        return (
            f"your settings ({_label(best)}, {base:,.1f} {unit}) were "
            "the fastest found; no change is recommended"
        )
    return (
        f"your loader is within {within:.1f}% of the best found ({_label(best)} at "
        f"{rate:,.1f} vs your {base:,.1f} {unit})"
        + (
            f", a gain the noise ({floor - 1:.0%}) could make alone"
            if floor is not None and not best.keep_baseline
            else ""
        )
        + "; no change is recommended"
    )


@dataclass(frozen=True)
class EpochRule:
    """The per-epoch rate decided the pick (NOTE [per-epoch rate] in ``tuning/epoch_cost.py``):
    the sentence that says so, and the pick's and the user's loader's rates per epoch."""

    sentence: str
    pick_samples_per_s: float | None
    baseline_samples_per_s: float | None
    speedup: float | None
    per_epoch: list[tuple[dict[str, Any], float]] = field(default_factory=list)  # (config, rate)

    def rate_of(self, config: Any) -> float | None:
        """A raced config's per-epoch rate (persistent_workers aside: it changes no restart
        the race measured)."""
        want = steady_config(config)
        return next((rate for c, rate in self.per_epoch if steady_config(c) == want), None)


def epoch_rule(section: dict[str, Any]) -> EpochRule | None:
    """The per-epoch rule where it decided the tuner's pick (the record's ``search.epochs``), else
    None: one sentence naming the epoch, the restart it pays and the rates per epoch."""
    epochs = mapping(mapping(section.get("search")).get("epochs"))
    if epochs.get("decides") is not True:
        return None
    rows = [
        row
        for row in epochs.get("configs") or []
        if isinstance(row, dict) and number(row.get("per_epoch_samples_per_s")) is not None
    ]
    if not rows:
        return None
    pick_label = epochs.get("pick")
    pick = next((row for row in rows if row.get("label") == pick_label), None)
    others = [row for row in rows if row is not pick]
    leader = next((row for row in others if row.get("label") == epochs.get("steady_leader")), None)
    # The config the rule turned down: the steady state's fastest, else the one whose start-up
    # takes the largest share of its epoch.
    rival = leader or max(
        others, key=lambda row: number(row.get("startup_share")) or 0.0, default=None
    )
    batches, samples = epochs.get("batches_per_epoch"), epochs.get("samples_per_epoch")
    length = f"{batches} batches ({samples} samples)" if batches else f"{samples} samples"
    named = rival if rival is not None else pick
    if named is None:
        return None

    def label(row: dict[str, Any]) -> str:
        return ran_label(section, row.get("config"), row.get("label"))

    workers = named.get("workers") or 0
    restarts = (
        f"each restarts {plural(workers, 'worker')} of {label(named)} "
        if workers
        else f"each starts {label(named)} again "
    )
    share = number(named.get("startup_share")) or 0.0
    sentence = (
        f"epochs are {length}; {restarts}({number(named.get('restart_s')) or 0.0:.2f} s, "
        f"{share:.0%} of its epoch), so the rate per epoch, start-ups included, decides"
    )
    if pick is not None and rival is not None:
        sentence += (
            f": {label(pick)} {_epoch_rate(pick, 'per_epoch')} vs {label(rival)} "
            f"{_epoch_rate(rival, 'per_epoch')} samples/s per epoch "
            f"({_epoch_rate(pick, 'steady')} vs {_epoch_rate(rival, 'steady')} in steady state)"
        )
        behind = (number(pick.get("per_epoch_samples_per_s")) or 0.0) < (
            number(rival.get("per_epoch_samples_per_s")) or 0.0
        )
        if behind and (best_of(section) or Best()).tie:
            # A noisy tie kept the cheaper config although its median is behind.
            sentence += "; within the noise of the race's rounds, so the cheaper config was kept"
    return EpochRule(
        sentence=sentence,
        pick_samples_per_s=number(epochs.get("pick_samples_per_s")),
        baseline_samples_per_s=number(epochs.get("baseline_samples_per_s")),
        speedup=number(epochs.get("speedup")),
        per_epoch=[
            (row.get("config") or {}, float(row["per_epoch_samples_per_s"])) for row in rows
        ],
    )


def _epoch_rate(row: dict[str, Any], which: str) -> str:
    value = number(row.get(f"{which}_samples_per_s"))
    return "?" if value is None else f"{value:,.0f}"


def is_tune_section(r: dict[str, Any]) -> bool:
    """Whether ``r`` carries what the tuner measured (its pick against the user's baseline)."""
    best, baseline = best_of(r), baseline_of(r)
    return (
        best is not None
        and baseline is not None
        and best.has("config")
        and baseline.has("config")
        and best.samples_per_s is not None
        and baseline.samples_per_s is not None
    )


def gain_floor(section: dict[str, Any]) -> float:
    """The least speed-up over the user's loader that is more than the noise: the tie margin or
    the race's measured noise, whichever is larger."""
    return 1 + max(TIE_MARGIN, search_of(section).noise or 0.0)


def keeps_yours(section: dict[str, Any]) -> bool:
    """The one rule behind "keep yours", for ``tune`` and ``doctor`` alike: the tuner found the
    user's loader within the noise of the best, or the pick's speed-up over it does not clear the
    noise (:func:`gain_floor`), or the pick is the user's own config."""
    return _keeps_yours(section, epoch_rule(section))


def baseline_failure(section: dict[str, Any]) -> str | None:
    """Why the user's own config gave no rate in the tuner (its trial failed: a worker that hangs
    only forked from stallscope's process, NOTE [fork after use]); None where it measured. "Keep
    yours" at 0 samples/s is a figure that cannot be true."""
    baseline = _baseline(baseline_of(section))
    if baseline.samples_per_s:
        return None
    for trial in trials_of(section):
        if trial.config == baseline.config and trial.error:
            return str(trial.error)
    return None


def _keeps_yours(section: dict[str, Any], rule: EpochRule | None) -> bool:
    best, baseline = _best(best_of(section)), _baseline(baseline_of(section))
    if best.keep_baseline or best.config == baseline.config:
        return True
    if baseline_failure(section) is not None and _rate(best) > 0:
        return False  # yours gave no rate: the pick is the only config measured to work
    # Where the per-epoch rate decided, the gain is per epoch (NOTE [per-epoch rate]).
    speedup = rule.speedup if rule is not None and rule.speedup is not None else best.speedup
    if speedup is None and best.samples_per_s is not None and baseline.samples_per_s:
        speedup = best.samples_per_s / baseline.samples_per_s
    return speedup is None or speedup < gain_floor(section)


def tune_pick(section: dict[str, Any]) -> dict[str, Any] | None:
    """The tuner's verdict on its pick: "keep yours" (:func:`keeps_yours`), or switch."""
    best, baseline = _best(best_of(section)), _baseline(baseline_of(section))
    rule = epoch_rule(section)  # derived once for the rule, the sentence and the figures
    if _keeps_yours(section, rule):
        return _keep_yours(section, rule)
    failed = baseline_failure(section)
    if failed is not None:
        return {
            "id": "loader-config",
            "title": "Use the tuned DataLoader settings",
            "detail": f"{_label(best)} instead of {_label(baseline)} "
            "(`stallscope tune --emit python` prints the call).",
            "measured": f"{_rate(best):.1f} samples/s; yours gave no rate here "
            f"({failed.rstrip('.')}); " + how_sure(best),
            "expected_gain": "not measured: your config failed here",
        }
    # keeps_yours is False: both rates are measured and the pick's gain clears the noise
    speedup = best.speedup or _rate(best) / _rate(baseline)
    measured = f"{_rate(best):.1f} vs {_rate(baseline):.1f} samples/s in steady state"
    if rule is not None and rule.pick_samples_per_s and rule.baseline_samples_per_s:
        speedup = rule.speedup or rule.pick_samples_per_s / rule.baseline_samples_per_s
        measured = (
            f"{rule.pick_samples_per_s:.1f} vs {rule.baseline_samples_per_s:.1f} samples/s per "
            f"epoch, start-ups included ({rule.sentence})"
        )
    return {
        "id": "loader-config",
        "title": "Use the tuned DataLoader settings",
        "detail": f"{_label(best)} instead of {_label(baseline)} "
        "(`stallscope tune --emit python` prints the call).",
        "measured": f"{measured}; " + how_sure(best),
        "expected_gain": f"{speedup:.2f}x throughput" + (" per epoch" if rule else ""),
    }


def knob_recommendations(section: dict[str, Any]) -> list[dict[str, Any]]:
    """What the tuner measured beyond its pick: single knobs that paid, workers beyond the cores,
    threads per worker. Nothing that changes the steady state when the verdict is "keep yours",
    and no knob whose variant raced the pick and lost.

    A knob effect counts only beyond the noise: the tie margin (or the race's noise) when
    measured interleaved, ``SCAN_MIN_GAIN`` (or twice the noise) from single scan measurements.
    """
    if keeps_yours(section):
        return []
    search = search_of(section)
    noise = search.noise or 0.0
    recs: list[dict[str, Any]] = []
    seen: set[str] = set()
    # A variant that raced and lost to the pick was weighed by the race: its knob, measured at
    # another config before the race, is no advice beside the pick. (The pick's own entry in the
    # race lacks the persistent_workers the epoch-boundary step may add to it.)
    best = best_of(section)
    lost = (
        {
            h.label
            for h in best.head_to_head
            if h.label and steady_config(h.config) != steady_config(best.config)
        }
        if best is not None
        else set()
    )
    # An effect without its figures (a record from elsewhere) is no evidence for a knob.
    measured = [
        e
        for e in search.effects
        if e.gain is not None
        and e.variant_samples_per_s is not None
        and e.parent_samples_per_s is not None
    ]
    for effect in sorted(measured, key=lambda e: -(e.gain or 0.0)):
        advice = _KNOB_ADVICE.get(effect.knob or "")
        if advice is None or advice[0] in seen or effect.variant in lost:
            continue
        confirmed = effect.source == "confirm"
        floor = max(TIE_MARGIN, noise) if confirmed else max(SCAN_MIN_GAIN, 2 * noise)
        gain = effect.gain or 0.0
        if gain < floor:
            continue
        seen.add(advice[0])
        rec_id, title, detail = advice
        how = "interleaved medians" if confirmed else "single measurements"
        recs.append(
            {
                "id": rec_id,
                "title": title,
                "detail": detail,
                "measured": (
                    f"{effect.variant}: {effect.variant_samples_per_s or 0.0:.1f} samples/s vs "
                    f"{effect.parent}: {effect.parent_samples_per_s or 0.0:.1f} samples/s ({how})"
                ),
                "expected_gain": f"+{gain:.0%} throughput",
            }
        )
    recs.extend(_beyond_cores(section))
    recs.extend(_worker_threads(section))
    return recs


def _keep_yours(section: dict[str, Any], rule: EpochRule | None) -> dict[str, Any]:
    best, baseline = _best(best_of(section)), _baseline(baseline_of(section))
    sentence = keep_yours_sentence(best, baseline, gain_floor(section), rule)
    measured = f"{_rate(best):.1f} vs {_rate(baseline):.1f} samples/s"
    if rule is not None:
        measured = f"{measured} in steady state; {rule.sentence}"
    return {
        "id": "keep-yours",
        "title": "Keep your DataLoader settings",
        "detail": sentence[0].upper() + sentence[1:] + ".",
        "measured": f"{measured}; " + how_sure(best),
        "expected_gain": "none beyond the noise",
    }


def _beyond_cores(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Latency-bound and the pick has more workers than cores: say so, with the measured gain over
    cores workers."""
    search = search_of(section)
    cores = (search.space or {}).get("cores")
    best = _best(best_of(section))
    workers = best.config["num_workers"]
    region = search.region.name if search.region else None
    if region != "latency-bound" or not cores or workers <= cores:
        return []
    at_cores = [
        t
        for t in trials_of(section)
        if t.config.get("num_workers") == cores
        and t.error is None
        and t.phase in {"scale", "climb"}
    ]
    if not at_cores:
        return []
    rate = max(t.samples_per_s or 0.0 for t in at_cores)
    gain = _rate(best) / rate - 1 if rate > 0 else 0.0
    if gain < SCAN_MIN_GAIN:
        return []
    cpu = (search.profile or {}).get("cpu_per_wall")
    return [
        {
            "id": "workers-beyond-cores",
            "title": f"Use more workers than cores ({workers} on {cores} core(s))",
            "detail": (
                "The fetch mostly waits (storage, network, sleep) rather than computing, so "
                "workers overlap their waits; the usual num_workers = cores leaves that idle time "
                "on the table."
            ),
            "measured": (
                f"{_rate(best):.1f} samples/s with {workers} workers vs "
                f"{rate:.1f} with {cores}"
                + (f"; the fetch used {cpu:.0%} CPU per wall second" if cpu is not None else "")
            ),
            "expected_gain": f"+{gain:.0%} throughput",
        }
    ]


def _worker_threads(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The pick fetches with threads: say how, against the best plain worker count measured
    (pure)."""
    best = _best(best_of(section))
    threads = best.config.get("worker_threads", 0)
    if not threads:
        return []
    plain = [
        t
        for t in trials_of(section)
        if t.error is None
        and not t.config.get("worker_threads")
        and (t.config.get("num_workers") or 0) > 0
    ]
    measured = f"{_rate(best):,.1f} samples/s with {_label(best)}"
    gain = None
    if plain:
        top = max(plain, key=lambda t: t.samples_per_s or 0.0)
        top_rate = top.samples_per_s or 0.0
        gain = _rate(best) / top_rate - 1 if top_rate > 0 else None
        measured += (
            f" vs {top_rate:,.1f} with the best plain worker count measured "
            f"({_label(top)}, "
            f"{top.config['num_workers']} processes)"
        )
    workers = best.config["num_workers"]
    where = f"each of the {workers} workers" if workers else "the main process"
    return [
        {
            "id": "worker-threads",
            "title": f"Fetch each batch's items with {threads} threads per worker",
            "detail": (
                f"The fetch mostly waits, and the dataset passed the thread-safety check: {where} "
                f"fetches a batch's items with {threads} threads, which overlaps the waits like "
                "more processes would, for a fraction of their memory. Wrap the dataset: dataset "
                f"= ss.threaded_dataset(dataset, threads={threads})."
            ),
            "measured": measured,
            "expected_gain": (
                f"{gain:+.0%} throughput with {workers} processes"
                if gain is not None
                else f"{workers} processes instead of more"
            ),
        }
    ]


def advice_in_words(advice: dict[str, Any]) -> str:
    """The recommended knob change as a sentence, for where its code could not be run
    (NOTE [verified snippets] in pipeline/verify.py)."""
    config, baseline = advice.get("config") or {}, advice.get("baseline") or {}
    knobs = advice.get("knobs")  # the kind's own: a factory takes only its parameters
    changed = [
        f"{k}={v!r}"
        for k, v in config.items()
        if baseline
        and baseline.get(k) != v
        and v is not None
        and (not isinstance(knobs, list) or k in knobs)
    ]
    where = advice.get("kind_description") or "your loader"
    what = (
        f"Set {', '.join(changed)} where you build {where}"
        if changed
        else f"Keep the settings of {where}"
    )
    reason = advice.get("reason")
    return what + (f" (no code is shown: {reason})." if reason else ".")
