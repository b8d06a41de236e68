"""The tuner's search strategy: phases of decisions over an
:class:`~stallscope.tuning.trial.Evaluator`.

Nothing here starts a worker. The strategy sees the pipeline only through an
evaluator (``measure`` one config, ``interleaved`` repeats of several, and a
clock), so the same code runs on real DataLoaders (``tuner.LoaderEvaluator``)
and on a simulated cost model with injected noise and a fake clock (the tests'
``tests/pipelines/tune_simulated.py``). The parts: :mod:`.space` (profile, knobs,
budgets), :mod:`.trial` (measurements, results), :mod:`.regions` (phase 2's
classification), :mod:`.confidence` (phase 5's pick and its confidence).

NOTE [tuning strategy]
A grid measures every combination; most of them are obviously bad once a few
cheap numbers are known. The search runs in phases, each bounded by a share
of the time budget:

0. *plan* — from the batch time the profile measured, how many measurements
   the budget fits (:func:`~.space.budget_plan`; a window holds at least
   ``min_batches`` batches, so slow pipelines get long measurements), said up
   front in the notes and the record.
1. *probe* — the user's baseline, ``num_workers=0`` (the single-process
   rate ``r0``) and any *seeds* the caller must see raced (``doctor``: the
   sweep's best), plus the in-process :class:`Profile` the caller measured
   (cost per sample, CPU time / wall time of the fetch, batch bytes, jitter).
2. *scale* — ``num_workers = cores``; with ``r0`` and the profile this picks
   the region (:func:`classify`): CPU-bound (optimum near the usable cores),
   latency-bound (the fetch mostly waits: more workers than cores overlap the
   waits, so worker counts grow geometrically — ×4 while the gain stays near
   linear and the CPU fraction predicts room, else ×2 — until the gain falls
   below the noise, the memory budget or the worker cap), or overhead-bound
   (a batch costs about as much as moving it between processes: 0 or 1 worker,
   batched fetching). Latency-bound, a thread-safe map-style dataset first gets
   the *threads* phase (``tuning/threads.py``): fetch threads per worker, then
   processes at the best thread count.
3. *refine* — midpoints between the best worker count and its measured
   neighbours, on one ladder of counts (NOTE [worker ladder]), while the
   ladder has one between them.
4. *knobs* — at the best worker count, one measurement per knob that can
   matter here: deeper prefetch (the whole ladder when the source is
   jittery), ``in_order=False`` with two or more workers (``in_order=True``
   where the scan ran unordered, NOTE [a jittery source's scan]), batched
   fetching when available, intra-op threads at 0 workers, ``pin_memory`` on
   CUDA, batch sizes when allowed. A delivery knob kept there starts the climb
   again (NOTE [climb again with the knobs kept]).
5. *race* (:mod:`.race`) — the finalists (best few, plus the fewest workers
   within a few percent), the seeds and the baseline race in interleaved
   rounds (A B … B A). Configs far behind after one round, or clearly slower
   (paired by round, beyond the noise) after two, drop out; the race stops
   when the pick is clear (:func:`~.confidence.decide`: 95% sure after at
   least four rounds, NOTE [what the confidence states]), on the round limit,
   or the budget. Below two rounds there is no confidence: the pick is "not
   confirmed", and what was left out is listed. Within the tie margin (3%,
   paired by round) of the leader the cheaper config wins (fewer workers,
   shallower prefetch) and the record says it was a tie: a plateau is not
   worth extra processes. When the best is within noise of the baseline, the verdict is
   "keep yours" (:func:`~.confidence.keeps_baseline`).
6. *startup* — with budget left, the start-up time of other start methods.
7. *epoch boundary* — the gap between epochs with and without persistent
   workers, on the config to recommend (:mod:`.persistence`); the flag is
   recommended only on that measurement.

Where epochs end within a window and their start-up is a noticeable share of
one (a re-iterated loader that restarts its workers every epoch), the rate per
epoch, start-ups included, ranks the finalists and decides the race and the
pick instead of the steady state (NOTE [per-epoch rate] in :mod:`.epoch_cost`).

The memory budget (:class:`MemoryBudget`, NOTE [memory budget] in space.py) is a
limit on measured memory: no config is measured whose conservative estimate
(the largest per-worker memory measured so far, times its workers, plus its
in-flight batches) exceeds it, and no config whose measured footprint exceeds
it races, is picked or is recommended. On a busy machine more processes win
more of the CPU from the other jobs, so the scan's rates favour them: only the
measured budget stops the climb there.

NOTE [knobs that read level]
The knob phase keeps a change only when it measured faster than its parent by
more than half the noise, then tries the next change on top of the one kept.
A deeper prefetch that read level (no slower, not clearly faster) is not kept,
so ``in_order=False`` is tried without it; when that also reads level, the
two are measured together once. Each alone may gain less than one window can
show while both together gain more, and a second run whose windows happened
to keep the deeper prefetch (``doctor``'s search, whose budget also holds the
sweep) tries exactly that combination: without the measurement, one command
would pick a config the other never measured and neither could say how far
apart they are.

NOTE [a jittery source's scan]
Where the profile saw jittery fetch times and ``in_order`` may change, the scan
(scale, climb, refine) runs with ``in_order=False``, and the knob phase
measures in-order delivery at the best worker count. An in-order window behind
a source whose items sometimes stall times the stalls: which windows a stall
fell in, and how long the batches queued behind it waited. On the tuner_vs_grid
jittery kind (1 ms of CPU per item, 5% of items stall 100 ms) in-order windows
read 8 workers at 543 samples/s and 16 at 1,127 with a noise of ±253%, so the
climb kept 8 ("too noisy to tell") while 16 unordered ran 1.6× faster than the
pick. Unordered windows of the same configs are steady enough to climb on. The
race still weighs ordered against unordered where both are near the top, and
prefers ordered on a tie (``cost_key``).

NOTE [climb again with the knobs kept]
When the knob phase keeps ``in_order`` or a deeper ``prefetch_factor`` that
measured faster than the plain config at the same worker count beyond both
measurements' whole noise (a gain within it, on a busy machine, would only buy
more processes on a plateau), the worker counts are climbed and refined again
with that knob from there, within the knob phase's share of the budget. Both
knobs change how far more workers pay (a slow batch holds fewer batches back,
a deeper queue absorbs more of it), and the first climb, made without them,
may have stopped on a step they would have carried.

NOTE [worker ladder]
The refine phase measures worker counts on one ladder, 1, 2, 3, 4, 6, 8, 12,
16, 24, 32, 48, … (powers of two and three times them, neighbours 1.33× to
1.5× apart): between two measured counts, the ladder's count nearest their
geometric mean, and none where the ladder has no count between them. Finer
steps than the ladder's are within the noise of single windows on a shared
machine, and a refine that took any midpoint (5 between 4 and 6, 54 between
32 and 91) let two runs of the same loader pick counts the other never
measured: ``doctor`` picking w=5 tied with w=6, ``tune`` w=6 without having
measured w=5, and neither able to say how far apart the two were. On one
ladder both measure the same counts. The climb's own steps (×2 or ×4 from the
usable cores), a memory cap and the sweep's grid may lie off it; only
midpoints are placed on it.

NOTE [climb past a flat step]
A step up whose rate lies within the noise of the fastest so far, either way,
does not end the climb: one more step is measured, compared with that
fastest. Single windows on a shared machine make a real gain read as flat
(and more processes win more of a busy machine's CPU, NOTE [memory budget]);
stopping there left the next step, which a grid such as ``doctor``'s sweep
measures (0, 1, 2, cores, 2× and 4× cores), out of the run altogether, so the
two commands could pick configs neither had measured against the other. A
clear decline still stops the climb, and so do a second flat step and a flat
step that reached ``FLAT_STEP_REACH`` × the usable cores: past the grid's
range a flat step is left to the refine phase, whose midpoints would cost race
rounds (on the simulated CPU-bound source, 0.8 of a round a run).

Noise decides for the cheaper config. A climb or refine step whose gain would
count (above :meth:`Search._sig`) but lies within the
measurements' own, uncapped noise is "too noisy to tell": the dearer config
stays out of the race and a note says so. In the race, when the rounds'
spread exceeds ``MAX_SIG``, a cheaper config that is not clearly slower than
the leader (paired by round, :func:`~.confidence.clearly_slower`) is tied
with it, and the cheaper is kept (``decide(noisy=True)``; the record's
``search.noisy_tie``); with fewer rounds than a confidence needs, the scan's
window noise decides the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..config import LoaderConfig
from .confidence import (
    Decision,
    RaceLog,
    decide,
    decide_from_scan,
    keeps_baseline,
    margin_interval,
    within_pct,
)
from .epoch_cost import EpochCost, epoch_cost
from .persistence import (
    choose_start_method,
    epoch_gap_cost,
    measure_persistent,
    measure_start_methods,
    start_method_pair,
    startup_of,
)
from .race import Race, entrants
from .regions import Region, classify
from .space import (
    MB,
    MemoryBudget,
    Profile,
    SearchSettings,
    SearchSpace,
    budget_plan,
    confirm_window,
    cost_key,
    revise_plan,
)
from .threads import explore_threads
from .trial import Effect, Evaluator, SearchResult, Trial, overhead_fit

# The noise threshold for a gain never exceeds this: 10%, above which the search would sooner
# stop early on noise than spend measurements telling it apart.
MAX_SIG = 0.10
# The climb passes one flat step below this many times the usable cores (NOTE [climb past a flat
# step]): the top of the grid a sweep measures by default.
FLAT_STEP_REACH = 4
# Knobs that change how batches queue and arrive, and so how far more workers pay (NOTE [climb
# again with the knobs kept]).
_DELIVERY_KNOBS = ("in_order", "prefetch_factor")
# A trial's rate per epoch, where that decides (NOTE [per-epoch rate] in epoch_cost.py).
_Rate = Callable[[Trial], float] | None


def ladder_midpoint(lo: int, hi: int) -> int | None:
    """The worker count the refine phase measures between ``lo`` and ``hi`` (NOTE [worker
    ladder]): the ladder's count nearest their geometric mean, strictly between them (``hi // 2``
    rounded to the ladder where ``lo`` is 0); None where the ladder has none."""
    between = [w for w in _ladder(hi) if lo < w < hi]
    if not between:
        return None
    centre = math.sqrt(lo * hi) if lo > 0 else hi / 2
    return min(between, key=lambda w: (abs(math.log(w / centre)), w))


def _ladder(top: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, … up to ``top``: powers of two and three times them."""
    out, power = [1], 1
    while power <= top:
        out += [2 * power, 3 * power]
        power *= 2
    return sorted(w for w in set(out) if w <= top)


class Search:
    """One tuning run: what it has learnt so far (the scan's trials, the notes, what was skipped),
    measuring a config within the time and memory budgets, and the phases of NOTE [tuning
    strategy] that decide what to measure next."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        profile: Profile,
        *,
        baseline: LoaderConfig,
        memory: MemoryBudget,
        settings: SearchSettings | None = None,
        on_trial: Callable[[Trial], None] | None = None,
        seeds: Sequence[tuple[LoaderConfig, str]] = (),
    ) -> None:
        self.ev = evaluator
        # Configs a caller needs in the final race, with their role (doctor: the sweep's best).
        # Seeds label as the baseline does (the knobs its kind has): a sweep's config read back from
        # its record carries no label knobs, and would read 'w=8 bs=32 pf=2' beside 'w=6 bs=32'.
        self.seeds = [
            (c if c.label_knobs is not None else c.replace(label_knobs=baseline.label_knobs), role)
            for c, role in seeds
            if c != baseline
        ]
        self.space = space
        self.profile = profile
        self.baseline = baseline
        self.memory = memory
        # A copy: run() may narrow the phases' shares of the budget (see _reserve_for_seeds).
        self.settings = dataclasses.replace(settings or SearchSettings())
        self.on_trial = on_trial
        self.trials: list[Trial] = []
        self.notes: list[str] = []
        self.effects: list[Effect] = []
        self.region = Region("cpu-bound", "not classified yet")
        self.skipped: list[dict[str, str]] = []
        self.plan: dict[str, Any] = {}
        self._scan: dict[LoaderConfig, Trial] = {}
        # The scan's epoch and start-up costs (NOTE [per-epoch rate]), as the race began.
        self._scan_cost: EpochCost | None = None
        # Configs whose gain over a cheaper one was within the noise: kept out of the race.
        self.unresolved: set[LoaderConfig] = set()
        self.race = Race(
            evaluator,
            self.settings,
            round_cost=self._round_cost,
            affordable=self._race_affordable,
            record=self._record,
            note=self._note,
            skip=self._skip,
            can_persist=space.can_persist,
        )
        # What the loader is stays the baseline's: a loader that batches itself still does, and
        # labels show the knobs its kind has (NOTE [loader kinds]).
        self._template = LoaderConfig(
            num_workers=1,
            batch_size=space.batch_size,
            prefetch_factor=min(space.prefetch_factors) if space.prefetch_factors else 2,
            pin_memory=space.pin_memory,
            multiprocessing_context=space.multiprocessing_context,
            in_order=not (space.in_order and profile.jittery),  # NOTE [a jittery source's scan]
            batches_itself=baseline.batches_itself,
            label_knobs=baseline.label_knobs,
        )

    # -- what the search knows, and measuring within the budgets ----------------------------------
    def workers(self, n: int, **changes: Any) -> LoaderConfig:
        if n <= 1:
            changes.setdefault("in_order", True)  # one worker delivers in order whatever the flag
        return self._template.replace(num_workers=n, **changes)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _skip(self, config: LoaderConfig, why: str) -> None:
        label = config.label()
        if not any(s["label"] == label for s in self.skipped):
            self.skipped.append({"label": label, "why": why})

    def _sig(self, *trials: Trial) -> float:
        """The gain that counts as real: the floor, or twice the combined window noise (capped:
        when unsure, one more step up costs a measurement, stopping early can cost the optimum)."""
        return max(self.settings.min_gain, min(self._window_noise(*trials), MAX_SIG))

    @staticmethod
    def _window_noise(*trials: Trial) -> float:
        """Twice the combined window noise of single measurements, uncapped."""
        return 2 * math.sqrt(sum((t.rel_se or 0.0) ** 2 for t in trials))

    def too_noisy(self, cheaper: Trial, dearer: Trial, gain: float) -> bool:
        """Whether the dearer config's gain over the cheaper one, large enough to count as real by
        :meth:`_sig` (capped at ``MAX_SIG``), is still within the measurements' noise: single
        measurements cannot tell the two apart, so the cheaper is kept (said in a note) rather than
        paid for in processes and memory."""
        noise = self._window_noise(cheaper, dearer)
        if noise <= MAX_SIG or gain >= 1 + noise or gain < 1 + self._sig(cheaper, dearer):
            return False  # quiet enough, beyond the noise, or no gain that would count anyway
        self._note(
            f"too noisy to tell {dearer.config.label()} from {cheaper.config.label()}: "
            f"{gain - 1:+.0%} is within the measurements' noise (±{noise:.0%}), so the cheaper "
            f"{cheaper.config.label()} is kept"
        )
        return True

    def rate(self, config: LoaderConfig) -> float:
        raced = self.race.log.median(config)
        if raced is not None:
            return raced
        trial = self._scan.get(config)
        return trial.samples_per_s if trial is not None and trial.ok else 0.0

    def estimate_cost(self, config: LoaderConfig, window_s: float) -> float:
        """Seconds a measurement of ``config`` will take, from what earlier ones took.

        Overhead (start-up, warm-up, shutdown) is fitted as ``a + b × workers``
        over past trials; the window stretches to ``min_batches`` batches at
        the rate of the nearest measured config with no more workers.
        """
        a, b = overhead_fit(self.trials)
        rate = self._rate_guess(config)
        window = window_s
        if rate > 0:
            window = max(window_s, self.settings.min_batches * config.batch_size / rate)
        return window + a + b * config.num_workers

    def _rate_guess(self, config: LoaderConfig) -> float:
        known = self.rate(config)
        if known > 0:
            return known
        below = [
            t.samples_per_s
            for c, t in self._scan.items()
            if t.ok and c.num_workers <= config.num_workers
        ]
        return max(below) if below else 0.0

    def affordable(self, seconds: float, share: float = 1.0) -> bool:
        return self.ev.elapsed() + seconds <= self.settings.budget_s * share

    def worker_cap(self, prefetch_factor: int = 2) -> int:
        return max(0, min(self.space.max_workers, self.memory.max_workers(prefetch_factor)))

    def measure(
        self, config: LoaderConfig, phase: str, *, share: float = 1.0, force: bool = False
    ) -> Trial | None:
        """Measure once (or reuse the scan result); None when the budget or memory says no."""
        if config in self._scan:
            return self._scan[config]
        if not force and not self.memory.fits(config):
            self._note(
                f"skipped {config.label()}: needs about {self.memory.need(config) / MB:.0f} MB, "
                f"over the {self.memory.budget_bytes / MB:.0f} MB memory budget"
            )
            self._skip(config, "not measured: its estimated memory exceeds the memory budget")
            return None
        window = self.settings.scan_window_s
        if not force and not self.affordable(self.estimate_cost(config, window), share):
            self._note(f"time budget: did not measure {config.label()} in the {phase} phase")
            self._skip(config, f"not measured: the time budget ran out in the {phase} phase")
            return None
        trial = self.ev.measure(config, window_s=window, phase=phase)
        self._record(trial)
        self._scan[config] = trial
        return trial

    def _record(self, trial: Trial) -> None:
        self.trials.append(trial)
        config = trial.config
        if config.num_workers > 0:
            total = trial.workers_bytes
            if total is None and trial.worker_bytes is not None:
                total = trial.worker_bytes * config.num_workers
            self.memory.observe_config(config, total)
            if self.memory.over(config):
                self._note(
                    f"{config.label()} measured {self.memory.need(config) / MB:,.0f} MB (workers "
                    f"and in-flight batches), over the {self.memory.budget_bytes / MB:,.0f} MB "
                    "memory budget: it is not raced, picked or recommended"
                )
                self._skip(config, "its measured memory exceeds the memory budget")
        if trial.error:
            self._note(f"{trial.config.label()} failed: {trial.error}")
        if self.on_trial is not None:
            self.on_trial(trial)

    def _scanned_worker_counts(self, *, within_budget: bool = True) -> dict[int, float]:
        """Rate per worker count among plain worker configs (the template's other knobs); only
        those within the memory budget unless ``within_budget`` is False."""
        out: dict[int, float] = {}
        for config, trial in self._scan.items():
            if within_budget and self.memory.over(config):
                continue
            if trial.ok and config == self.workers(config.num_workers):
                out[config.num_workers] = trial.samples_per_s
        return out

    def usable(self) -> dict[LoaderConfig, Trial]:
        """The scan's successful trials within the memory budget: the ones that may race or be
        picked (NOTE [memory budget])."""
        return {
            c: t
            for c, t in self._scan.items()
            if t.ok and not self.memory.over(c) and c not in self.unresolved
        }

    def best_scanned(
        self, predicate: Callable[[LoaderConfig], bool] = lambda c: True
    ) -> LoaderConfig | None:
        found = [(t.samples_per_s, c) for c, t in self.usable().items() if predicate(c)]
        if not found:
            return None
        return max(found, key=lambda pair: pair[0])[1]

    # -- phases ----------------------------------------------------------------------
    def run(self, on_plan: Callable[[dict[str, Any]], None] | None = None) -> SearchResult:
        self.plan = budget_plan(
            self.profile, self.space, self.settings, elapsed_s=self.ev.elapsed()
        )
        self._note(self.plan["summary"])
        if on_plan is not None:
            on_plan(self.plan)
        self._probe()
        self._revise_plan()
        self._reserve_for_seeds()
        self._scale()
        self._refine()
        self._knobs()
        self._climb_again()
        decision = self._confirm()
        measure_start_methods(self, decision.pick)
        return self._result(decision)

    def _revise_plan(self) -> None:
        left = max(0.0, self.settings.budget_s - self.ev.elapsed())
        note = revise_plan(self.plan, [t.cost_s for t in self.trials if t.cost_s > 0], left_s=left)
        if note:
            self._note(note)

    def _reserve_for_seeds(self) -> None:
        """With seeds (doctor: the sweep's best), the race that settles one winner comes before more
        scanning: the scan and knob phases stop early enough for two rounds of the seeds against the
        tuner's best, at the costs the probe measured."""
        if not self.seeds:
            return
        settings = self.settings
        seeds = [c for c, _ in self.seeds]
        rounds_s = settings.min_rounds * self._round_cost([*seeds, seeds[0]])
        room = 1 - rounds_s / settings.budget_s
        settings.scan_share = max(0.2, min(settings.scan_share, room))
        settings.knobs_share = max(settings.scan_share, min(settings.knobs_share, room))

    def _probe(self) -> None:
        self.measure(self.baseline, "baseline", force=True)
        zero = self.workers(0)
        if zero != self.baseline:
            self.measure(zero, "probe", force=True)
        for config, _role in self.seeds:
            self.measure(config, "seed", force=True)
        # Cheap and often decisive for in-memory data: batched fetching, when the profile saw a
        # gain.
        if self.space.batched_fetch and (self.profile.batched_speedup or 0.0) >= 1.5:
            self._try_variant(
                "batched_fetch",
                zero,
                zero.replace(batched_fetch=True),
                self.settings.scan_share,
                "probe",
            )

    def _scale(self) -> None:
        share = self.settings.scan_share
        zero = self.workers(0)
        r0 = self.rate(zero)
        cap = self.worker_cap(self._template.prefetch_factor or 2)
        if cap < 1:
            self._note(
                "num_workers is limited to 0 here"
                if self.space.max_workers < 1
                else "the memory budget leaves no room for a worker process; staying single-process"
            )
            self.region = classify(self.profile, r0, None, self.space.cores, self.space.batch_size)
            explore_threads(self)  # a loader whose own threads are its only concurrency knob
            return
        start = min(self.space.cores, cap)
        first = self.measure(self.workers(start), "scale", share=share)
        rc = first.samples_per_s if first is not None and first.ok else None
        self.region = classify(self.profile, r0, rc, self.space.cores, self.space.batch_size)
        if rc is None:
            return
        if start > 1 and rc < r0 * (1 + self.settings.min_gain):
            self.measure(self.workers(1), "scale", share=share)
        explore_threads(self)  # latency-bound only: processes × threads, before the costlier climb
        gain = rc / r0 if r0 > 0 else float(start)
        self._climb(start, last_gain=gain, last_factor=float(max(1, start)), share=share)

    def _cap_reason(self, cap: int) -> str:
        """Which limit ``worker_cap`` reached."""
        if cap < self.space.max_workers:
            return "more would not fit the memory budget"
        if self.space.epoch_batches is not None and cap >= self.space.epoch_batches:
            return (
                f"one epoch holds {self.space.epoch_batches} batches, and workers beyond them "
                "only wait"
            )
        return "the most workers searched (--max-workers)"

    def _climb_factor(self, current: int, last_gain: float, last_factor: float) -> int:
        predicted = self.region.predicted_workers or 0.0
        near_linear = last_gain >= 0.6 * last_factor
        if self.region.name == "latency-bound" and predicted >= 4 * current and near_linear:
            return 4
        return 2

    def _climb(self, current: int, *, last_gain: float, last_factor: float, share: float) -> None:
        """Grow the worker count geometrically while each step gains more than the noise; a step
        that neither gains nor loses beyond it gets one more step (NOTE [climb past a flat
        step])."""
        top = current  # the most workers measured; ``current`` is the fastest of the climb
        cores = max(1, self.space.cores)
        flat_steps_left = 1
        while True:
            cap = self.worker_cap(self._template.prefetch_factor or 2)
            factor = self._climb_factor(top, last_gain, last_factor)
            nxt = min(top * factor, cap)
            if nxt <= top:
                if cap <= top:
                    self._note(f"worker count capped at {cap}: {self._cap_reason(cap)}")
                return
            here = self._scan[self.workers(current)]
            trial = self.measure(self.workers(nxt), "climb", share=share)
            if trial is None or not trial.ok:
                return
            if self.memory.over(trial.config):
                return  # measured beyond the memory budget (noted): no further up
            gain = trial.samples_per_s / here.samples_per_s if here.samples_per_s > 0 else 0.0
            last_gain, last_factor, top = gain, float(nxt) / top, nxt
            sig = self._sig(here, trial)
            if gain < 1 + sig:
                if gain <= 1 - sig or flat_steps_left == 0 or nxt >= FLAT_STEP_REACH * cores:
                    return  # a decline, or no flat step to pass: refine between the neighbours
                flat_steps_left -= 1
                if gain > 1:
                    current = nxt
                continue
            if self.too_noisy(here, trial, gain):
                self.unresolved.add(trial.config)
                return  # the noise hides whether the step gained: keep the cheaper
            current = nxt

    def _refine(self, rounds: int = 3, share: float | None = None) -> None:
        share = self.settings.scan_share if share is None else share
        for _ in range(rounds):
            scanned = self._scanned_worker_counts()
            if not scanned:
                return
            best = max(scanned, key=lambda w: scanned[w])
            # Neighbours measured over the memory budget bound the bracket too: a midpoint may fit.
            every = self._scanned_worker_counts(within_budget=False)
            lower = [w for w in every if w < best]
            upper = [w for w in every if w > best]
            mids = []
            for neighbour in (max(lower) if lower else None, min(upper) if upper else None):
                if neighbour is None:
                    continue
                lo, hi = sorted((neighbour, best))
                mid = ladder_midpoint(lo, hi)
                if mid is not None and mid not in every:
                    mids.append(mid)
            if not mids:
                return
            for mid in mids:
                trial = self.measure(self.workers(mid), "refine", share=share)
                if trial is None:
                    return
                self._resolve(self._scan[self.workers(best)], trial)

    def _resolve(self, a: Trial, b: Trial) -> None:
        """Of two measured worker counts, the dearer one stays out of the race where its gain over
        the cheaper is within the measurements' noise (:meth:`too_noisy`)."""
        if not (a.ok and b.ok):
            return
        cheaper, dearer = sorted((a, b), key=lambda t: cost_key(t.config))
        gain = dearer.samples_per_s / cheaper.samples_per_s if cheaper.samples_per_s > 0 else 0.0
        if gain > 1 and self.too_noisy(cheaper, dearer, gain):
            self.unresolved.add(dearer.config)

    def _jittery(self) -> bool:
        # Only the in-process per-item times: inter-batch waits with many workers are bursty by
        # nature.
        return self.profile.jittery

    def _try_variant(
        self,
        knob: str,
        parent: LoaderConfig,
        variant: LoaderConfig,
        share: float,
        phase: str = "knobs",
    ) -> Trial | None:
        if variant == parent or variant in self._scan:
            return self._scan.get(variant)
        trial = self.measure(variant, phase, share=share)
        self._effect(knob, parent, variant)
        return trial

    def _effect(self, knob: str, parent: LoaderConfig, variant: LoaderConfig) -> None:
        """Record what changing ``knob`` from ``parent`` to ``variant`` measured in the scan."""
        pair = self._measured(parent, variant)
        if pair is not None:
            a, b = pair
            self.effects.append(
                Effect(knob, parent, variant, a.samples_per_s, b.samples_per_s, "scan")
            )

    def _measured(self, first: LoaderConfig, second: LoaderConfig) -> tuple[Trial, Trial] | None:
        """The scan's trials of both configs, or None where either was not measured or failed."""
        a, b = self._scan.get(first), self._scan.get(second)
        if a is None or b is None or not a.ok or not b.ok:
            return None
        return a, b

    def _improves(self, variant: LoaderConfig, parent: LoaderConfig) -> bool:
        pair = self._measured(variant, parent)
        if pair is None or self.memory.over(variant):
            return False
        a, b = pair
        return a.samples_per_s > b.samples_per_s * (1 + self._sig(a, b) / 2)

    def _beyond_noise(self, variant: LoaderConfig, parent: LoaderConfig) -> bool:
        """Whether ``variant`` measured faster than ``parent`` beyond both measurements' whole
        noise (uncapped, unlike :meth:`_improves`)."""
        pair = self._measured(variant, parent)
        if pair is None or pair[1].samples_per_s <= 0:
            return False
        a, b = pair
        floor = max(self._sig(a, b), self._window_noise(a, b))
        return a.samples_per_s > b.samples_per_s * (1 + floor)

    def _not_slower(self, variant: LoaderConfig, parent: LoaderConfig) -> bool:
        pair = self._measured(variant, parent)
        if pair is None or self.memory.over(variant):
            return False
        a, b = pair
        return a.samples_per_s >= b.samples_per_s

    def _knobs(self) -> None:
        share = self.settings.knobs_share
        # The best plain or threaded worker config (threads phase): knobs apply to either.
        best = self.best_scanned(
            lambda c: c == self.workers(c.num_workers, worker_threads=c.worker_threads)
        )
        if best is None:
            return
        space = self.space
        if best.num_workers > 0:
            # A continuously consumed loader gains from deeper prefetch only when batch times vary:
            # the whole ladder for jittery sources, one cheap probe otherwise.
            deeper = sorted(p for p in space.prefetch_factors if p > (best.prefetch_factor or 2))
            if not self._jittery():
                deeper = deeper[:1] if best.num_workers <= 2 * space.cores else []
            level: LoaderConfig | None = None  # a deeper prefetch that read level with ``best``
            for pf in deeper:
                variant = best.replace(prefetch_factor=pf)
                self._try_variant("prefetch_factor", best, variant, share)
                if not self._improves(variant, best):
                    level = variant if self._not_slower(variant, best) else None
                    break
                best = variant
            if space.in_order and best.num_workers > 1 and not best.in_order:
                # Scanned unordered (a jittery source): what in-order delivery would cost there.
                ordered = best.replace(in_order=True)
                self.measure(ordered, "knobs", share=share)  # or the scan's measurement of it
                self._effect("in_order", ordered, best)
            elif space.in_order and best.num_workers > 1:
                # Worth one probe even when per-item times look steady: decode times that
                # vary a little still stall an in-order loader behind its slowest worker.
                unordered = best.replace(in_order=False)
                self._try_variant("in_order", best, unordered, share)
                if level is not None and self._not_slower(unordered, best):
                    # Two changes that each read level within the noise, measured together once:
                    # gains below the noise can add up (NOTE [knobs that read level]).
                    self._try_variant("in_order", level, level.replace(in_order=False), share)
        if best.num_workers > 0:
            for method in space.worker_methods:  # torchdata.nodes: the mapper's other method
                self._try_variant("worker_method", best, best.replace(worker_method=method), share)
        for (
            steps
        ) in space.snapshot_steps:  # StatefulDataLoader: how often worker state is snapshotted
            self._try_variant(
                "snapshot_every_n_steps", best, best.replace(snapshot_every_n_steps=steps), share
            )
        if space.batched_fetch:
            zero = self.workers(0)
            self._try_variant("batched_fetch", zero, zero.replace(batched_fetch=True), share)
            if best.num_workers > 0:
                self._try_variant(
                    "batched_fetch", best, best.replace(batched_fetch=True, worker_threads=0), share
                )
        single = self.best_scanned(lambda c: c.num_workers == 0)
        if space.threads and single is not None and self._near_top(single):
            for n in space.threads:
                self._try_variant("torch_threads", single, single.replace(torch_threads=n), share)
        top = self.best_scanned() or best
        if space.pin_memory:
            self._try_variant("pin_memory", top, top.replace(pin_memory=not top.pin_memory), share)
        for bs in space.batch_sizes:
            self._try_variant("batch_size", top, top.replace(batch_size=bs), share)

    def _climb_again(self) -> None:
        """With a delivery knob kept (``in_order``, ``prefetch_factor``) that measured faster than
        the plain config at the same worker count, climb and refine the worker counts again with
        it (NOTE [climb again with the knobs kept])."""
        template = self._template
        best = self.best_scanned(
            lambda c: (
                c
                == self.workers(
                    c.num_workers, in_order=c.in_order, prefetch_factor=c.prefetch_factor
                )
            )
        )
        if best is None or best.num_workers < 2:
            return
        kept = {
            knob: getattr(best, knob)
            for knob in _DELIVERY_KNOBS
            if getattr(best, knob) != getattr(template, knob)
        }
        if not kept or not self._beyond_noise(best, self.workers(best.num_workers)):
            return
        self._note(
            f"{best.label()} measured faster than {self.workers(best.num_workers).label()}: the "
            "worker counts were climbed again with "
            + " and ".join(f"{knob}={value}" for knob, value in kept.items())
        )
        share = self.settings.knobs_share
        self._template = template.replace(**kept)
        try:
            self._climb(best.num_workers, last_gain=1.0, last_factor=1.0, share=share)
            self._refine(share=share)
        finally:
            self._template = template

    def _near_top(self, config: LoaderConfig, within: float = 0.25) -> bool:
        best = self.best_scanned()
        return best is not None and self.rate(config) >= self.rate(best) * (1 - within)

    # -- the race --------------------------------------------------------------------
    def finalists(self, rate: Callable[[Trial], float] | None = None) -> list[LoaderConfig]:
        """The best few scanned configs, plus the cheapest one within a few percent of the best,
        ranked by ``rate`` (the rate that decides: per epoch where the scan saw short epochs whose
        start-up matters, NOTE [per-epoch rate] in epoch_cost.py; default the steady state)."""
        ranked = sorted(
            ((rate(t) if rate else t.samples_per_s, c) for c, t in self.usable().items()),
            key=lambda p: -p[0],
        )
        if not ranked:
            return []
        top = ranked[0][0]
        limit = max(2, self.settings.max_finalists)
        chosen = [c for r, c in ranked if r >= top * 0.9][:limit]
        # Single measurements can mislead on a busy machine: the runner-up races too, however far
        # behind the scan put it: without a rival in the rounds there is no confidence (the race
        # keeps it only until the pick has raced enough rounds for one).
        if len(chosen) == 1 and len(ranked) > 1:
            chosen.append(ranked[1][1])
        # A plateau: the cheapest config within noise of the best may be worth fewer processes.
        cheapest = min(
            (c for r, c in ranked if r >= top * (1 - 2 * self.settings.min_gain)), key=cost_key
        )
        if cheapest not in chosen:
            chosen = chosen[: limit - 1] + [cheapest]
        return chosen

    def _round_cost(self, configs: Sequence[LoaderConfig]) -> float:
        return 2 * sum(self.estimate_cost(c, confirm_window(c, self.settings)) for c in configs)

    def _race_affordable(self, seconds: float) -> bool:
        """Two rounds come first; rounds beyond them leave room for the epoch-boundary
        measurement."""
        reserve = 0.0
        if self.race.rounds >= self.settings.min_rounds:
            leader = self.best_scanned()
            reserve = (
                epoch_gap_cost(self, leader) if leader is not None and leader.num_workers else 0.0
            )
        return self.affordable(seconds + reserve)

    def _race_rates(self) -> tuple[dict[LoaderConfig, Trial], dict[LoaderConfig, float], _Rate]:
        """The configs that may race with their scan trials, the scan's rates that rank them, and
        the per-epoch rate where that decides (else None)."""
        # Only configs within the memory budget race (NOTE [memory budget] in space.py).
        usable = self.usable()
        # The caller's seeds and the user's own config race whatever the scan's noise said, as
        # long as they fit.
        for config in [self.baseline, *(c for c, _ in self.seeds)]:
            trial = self._scan.get(config)
            if trial is not None and trial.ok and not self.memory.over(config):
                usable[config] = trial
        # Short epochs whose start-up matters: the scan's rates per epoch (NOTE [per-epoch rate]).
        self._scan_cost = scan_cost = epoch_cost(
            list(usable.values()),
            {c: t.samples_per_s for c, t in usable.items()},
            can_persist=self.space.can_persist,
        )
        per_epoch = scan_cost.trial_rate if scan_cost is not None and scan_cost.decides else None
        ok = {c: per_epoch(t) if per_epoch else t.samples_per_s for c, t in usable.items()}
        return usable, ok, per_epoch

    def _ordered_twin(self, finalists: Sequence[LoaderConfig]) -> LoaderConfig | None:
        """Where the scan ran unordered (NOTE [a jittery source's scan]), the in-order twin of
        the cheapest unordered finalist, which a tie would pick: measured here if the scan has not,
        so that it races and order is given up only for a gain the rounds show."""
        if self._template.in_order:
            return None
        unordered = [c for c in finalists if not c.in_order and c.num_workers > 1]
        if not unordered:
            return None
        twin = min(unordered, key=cost_key).replace(in_order=True)
        if twin in finalists:
            return None
        trial = self.measure(twin, "knobs")
        return twin if trial is not None and trial.ok and not self.memory.over(twin) else None

    def _confirm(self) -> Decision:
        usable, ok, per_epoch = self._race_rates()
        finalists = self.finalists(per_epoch)
        twin = self._ordered_twin(finalists)
        if twin is not None:
            usable, ok, per_epoch = self._race_rates()
            finalists = [*finalists, twin]
        seeds = [(c, role) for c, role in self.seeds if c in usable]
        self.race.earlier = list(self.trials)
        decision = self.race.run(entrants(ok, finalists, seeds, self.baseline))
        if decision is None:
            # Not one round raced: single measurements pick, and within their noise floor the
            # cheaper config.
            tolerance = max(self.settings.tolerance, self.settings.min_gain)
            return decide_from_scan(usable, self.baseline, tolerance=tolerance, rate=per_epoch)
        deciding = self.race.deciding
        noise = self.race.noise(deciding=True)
        if self.race.rounds < self.settings.min_rounds:
            return self._cheaper_within_window_noise(decision)
        if noise is not None and noise > MAX_SIG:
            # The rounds spread wider than the search can resolve: configs they cannot tell apart
            # from the fastest are tied with it, and the cheaper is kept.
            decision = decide(deciding, margin=self.settings.tie_margin, noisy=True)
            if decision.noisy_tie:
                self._note(
                    f"too noisy to tell {decision.pick.label()} from {decision.leader.label()}: "
                    f"one config's measurements in a round spread {noise:.0%} (beyond the "
                    f"{MAX_SIG:.0%} the search resolves) and {decision.pick.label()} was not "
                    "clearly slower, so the cheaper config is kept"
                )
        return decision

    def _cheaper_within_window_noise(self, decision: Decision) -> Decision:
        """Fewer rounds than a confidence needs: the cheapest raced config whose single
        measurements cannot tell it from the pick (:meth:`too_noisy`) is kept instead."""
        pick = decision.pick
        mine = self._scan.get(pick)
        if mine is None or pick not in decision.medians:
            return decision
        for config in sorted(decision.medians, key=cost_key):
            if cost_key(config) >= cost_key(pick):
                break
            theirs = self._scan.get(config)
            rate = decision.medians[config]
            if theirs is None or rate <= 0:
                continue
            if self.too_noisy(theirs, mine, decision.medians[pick] / rate):
                return dataclasses.replace(decision, pick=config, tie=True, noisy_tie=True)
        return decision

    # -- result --------------------------------------------------------------------
    def _result(self, decision: Decision) -> SearchResult:
        pick = decision.pick
        # The figures reported are the steady state's; the decision's own medians are in the rate
        # that decided (per epoch where epochs are short: NOTE [per-epoch rate] in epoch_cost.py).
        rate = self.rate(pick)
        base_rate = self.rate(self.baseline)
        self.race.confirm_effects(self.effects)
        noise = self.race.noise()
        deciding = self.race.deciding
        per_epoch, base_deciding = self._deciding_baseline(deciding, base_rate)
        keep = pick == self.baseline or keeps_baseline(
            decision.medians.get(pick, rate),
            base_deciding,
            paired=deciding.ratios(pick, self.baseline),
            noise=self.race.noise(deciding=True),
            min_gain=self.settings.min_gain,
            seed=self.settings.seed,
        )
        if keep and self.memory.over(self.baseline):
            keep = False  # the user's own config is beyond the budget: not a config to keep
            self._note(
                f"your config {self.baseline.label()} measured beyond the memory budget, so the "
                f"pick is {pick.label()}, within it"
            )
        startup = startup_of(self.trials, pick)
        if keep:
            _, persistent = measure_persistent(self, self.baseline)
        else:
            pick = choose_start_method(
                pick,
                self.space.contexts,
                functools.partial(start_method_pair, self),
                self._scan,
                note=self._note,
            )
            persisted, persistent = measure_persistent(self, pick)
            if self.space.persistent_in_pick:
                pick = persisted
        if self.baseline.persistent_workers and pick.num_workers:
            pick = pick.replace(
                persistent_workers=True
            )  # the user's choice; steady state is the same
        return SearchResult(
            pick=pick,
            samples_per_s=rate,
            baseline=self.baseline,
            baseline_samples_per_s=base_rate,
            confidence=decision.confidence,
            region=self.region,
            trials=self.trials,
            effects=self.effects,
            notes=self.notes,
            elapsed_s=self.ev.elapsed(),
            runner_up=decision.runner_up,
            margin=decision.margin,
            margin_interval=decision.margin_interval,
            gain_interval=None
            if keep or decision.pick == self.baseline
            else margin_interval(deciding.log_ratios(decision.pick, self.baseline)),
            tie=decision.tie,
            tie_margin=decision.tie_margin,
            finalists=self._finalists(decision),
            rounds=self.race.rounds,
            noise=noise,
            startup_s=startup,
            memory=self.memory,
            head_to_head=self.race.head_to_head(),
            skipped=self.skipped,
            keep_baseline=keep,
            within_pct=within_pct(rate, base_rate)
            if not per_epoch
            else within_pct(decision.medians.get(pick, 0.0), base_deciding),
            plan=self.plan,
            persistent=persistent,
            epochs=self._epochs(decision, per_epoch),
            pick_memory=self._pick_memory(self.baseline if keep else pick),
            noisy_tie=None
            if not decision.noisy_tie
            else {
                "pick": decision.pick.label(),
                "leader": decision.leader.label(),
                "rounds_noise": None if noise is None else round(noise, 4),
                "resolvable_noise": MAX_SIG,
            },
        )

    def _finalists(self, decision: Decision) -> dict[str, float]:
        """Label → steady-state median of every raced config (the scan's rates when none raced)."""
        medians = {
            c: m for c in self.race.log.configs() if (m := self.race.log.median(c)) is not None
        } or decision.medians
        return {c.label(): m for c, m in sorted(medians.items(), key=lambda p: -p[1])}

    def _deciding_baseline(self, deciding: RaceLog, steady: float) -> tuple[bool, float]:
        """Whether the per-epoch rate decided (NOTE [per-epoch rate]), and the user's loader's
        rate in the rate that decided: the race's, or the scan's where no round raced."""
        if self.race.rounds:
            if self.race.per_epoch and deciding is not self.race.log:
                raced = deciding.median(self.baseline)
                return True, raced if raced is not None else self._scan_per_epoch(self.baseline)
            return False, steady
        cost = self._scan_cost
        if cost is None or not cost.decides:
            return False, steady
        return True, self._scan_per_epoch(self.baseline)

    def _scan_per_epoch(self, config: LoaderConfig) -> float:
        """``config``'s per-epoch rate from its scan measurement (one that did not race)."""
        cost, trial = self._scan_cost, self._scan.get(config)
        if cost is None or trial is None or not trial.ok or config not in cost.restart_s:
            return 0.0
        return cost.trial_rate(trial)

    def _epochs(self, decision: Decision, per_epoch: bool) -> dict[str, Any] | None:
        """The epoch's length and each raced config's per-epoch rate (the scan's where no round
        raced), and whether that rate decided (NOTE [per-epoch rate]); None where no trial saw an
        epoch end."""
        if self.race.rounds:
            cost = self.race.epochs()
            if cost is None:
                return None
            log = cost.log(self.race.round_trials)
            medians = {c: m for c in log.configs() if (m := log.median(c)) is not None}
            steady = {c: m for c in log.configs() if (m := self.race.log.median(c)) is not None}
        else:
            cost = self._scan_cost
            if cost is None:
                return None
            scanned = {c: t for c, t in self._scan.items() if c in cost.restart_s and t.ok}
            medians = {c: cost.trial_rate(t) for c, t in scanned.items()}
            steady = {c: t.samples_per_s for c, t in scanned.items()}
        out = cost.to_dict(medians, decides=per_epoch)
        if per_epoch:
            pick = medians.get(decision.pick)
            base = medians.get(self.baseline) or self._scan_per_epoch(self.baseline) or None
            out["pick"] = decision.pick.label()
            out["pick_samples_per_s"] = None if pick is None else round(pick, 2)
            out["baseline_samples_per_s"] = None if base is None else round(base, 2)
            out["speedup"] = round(pick / base, 4) if pick and base else None
            out["steady_leader"] = max(steady, key=lambda c: steady[c]).label()
        return out

    def _pick_memory(self, config: LoaderConfig) -> dict[str, Any]:
        """The budget and the measured memory of the config to recommend (NOTE [memory budget])."""
        memory = self.memory
        measured = memory.measured_bytes(_memory_shape(config, self._scan))
        need = measured if measured is not None else memory.need(config)
        return {
            "budget_mb": round(memory.budget_bytes / MB, 1),
            "workers_mb": round(need / MB, 1),
            "measured": measured is not None,
            "within_budget": need <= memory.budget_bytes,
            "over_budget": [
                c.label() for c in sorted(memory.footprints, key=cost_key) if memory.over(c)
            ],
        }


def _memory_shape(config: LoaderConfig, scan: dict[LoaderConfig, Trial]) -> LoaderConfig:
    """The measured config that holds the same memory as ``config``: the pick may differ from it
    only in persistent_workers, which keeps the same workers alive across epochs."""
    if config in scan:
        return config
    for other in scan:
        if other.replace(persistent_workers=config.persistent_workers) == config:
            return other
    return config
