"""The search strategy on a simulated, deterministic cost model (no workers, fake clock,
injected noise)."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
from tune_costmodel import CPU_BOUND, JITTERY, LATENCY_BOUND, TINY_IN_MEMORY, CostModel, dense_space
from tune_simulated import SimulatedEvaluator

from stallscope.config import LoaderConfig
from stallscope.tuning.confidence import RaceLog, clearly_slower, decide, keeps_baseline, within_pct
from stallscope.tuning.regions import classify
from stallscope.tuning.search import Search
from stallscope.tuning.space import MB, MemoryBudget, Profile, SearchSettings, SearchSpace
from stallscope.tuning.trial import Trial


def _search(
    model: CostModel,
    *,
    seed: int = 0,
    noise: float = 0.03,
    budget_s: float = 60.0,
    memory_mb: float = 16_000,
    max_workers: int = 128,
    epoch_batches: int | None = None,
    baseline: LoaderConfig | None = None,
    seeds=(),
    startup=None,
    persistent_in_pick: bool = True,
    **settings,
):
    profile = model.profile()
    space = SearchSpace(
        cores=model.cores,
        batch_size=model.batch_size,
        max_workers=max_workers,
        epoch_batches=epoch_batches,
        batched_fetch=model.batched,
        threads=(1,) if model.threads_gain != 1.0 else (),
        persistent_in_pick=persistent_in_pick,
    )
    memory = MemoryBudget(budget_bytes=int(memory_mb * MB), batch_bytes=profile.batch_bytes)
    ev = SimulatedEvaluator(
        model.rate,
        noise=noise,
        seed=seed,
        startup_fn=startup or model.startup,
        worker_bytes_fn=model.worker_bytes,
    )
    result = Search(
        ev,
        space,
        profile,
        baseline=baseline or LoaderConfig(batch_size=model.batch_size),
        memory=memory,
        settings=SearchSettings(budget_s=budget_s, seed=seed, **settings),
        seeds=seeds,
    ).run()
    return result, ev


def _optimum(model: CostModel, **kwargs) -> float:
    return model.best_over(dense_space(model, **kwargs))[1]


@pytest.mark.parametrize("seed", range(4))
def test_cpu_bound_lands_around_the_usable_cores(seed):
    result, _ = _search(CPU_BOUND, seed=seed)
    assert result.region.name == "cpu-bound"
    assert 2 <= result.pick.num_workers <= 8
    assert CPU_BOUND.rate(result.pick) >= 0.97 * _optimum(CPU_BOUND)
    assert result.elapsed_s <= 60


@pytest.mark.parametrize("seed", range(4))
def test_latency_bound_goes_far_beyond_the_cores(seed):
    result, ev = _search(LATENCY_BOUND, seed=seed)
    assert result.region.name == "latency-bound"
    assert result.pick.num_workers >= 16  # on 2 cores
    assert LATENCY_BOUND.rate(result.pick) >= 0.97 * _optimum(LATENCY_BOUND)
    # A strategy, not a grid: a couple of dozen measurements, well within the budget.
    assert len(ev.measured) <= 40
    assert result.speedup is not None and result.speedup > 10


@pytest.mark.parametrize("seed", range(3))
def test_tiny_in_memory_picks_batched_fetch_in_one_process(seed):
    result, _ = _search(TINY_IN_MEMORY, seed=seed)
    assert result.region.name == "overhead-bound"
    assert result.pick.num_workers == 0 and result.pick.batched_fetch
    assert TINY_IN_MEMORY.rate(result.pick) >= 0.97 * _optimum(TINY_IN_MEMORY, batched=True)
    knobs = {e.knob for e in result.effects}
    assert "batched_fetch" in knobs


def test_tiny_in_memory_without_batched_fetch_stays_near_the_flat_optimum():
    model = dataclasses.replace(TINY_IN_MEMORY, batched=False)
    result, _ = _search(model)
    assert not result.pick.batched_fetch
    assert model.rate(result.pick) >= 0.97 * _optimum(model)


def test_jittery_source_tries_out_of_order_delivery():
    # Across noise draws, not one: the race keeps the cheaper of two configs within its 3% tie
    # margin, so a single draw may land a few percent below the optimum by design.
    optimum = _optimum(JITTERY)
    shares = []
    for seed in range(12):
        result, ev = _search(JITTERY, seed=seed)
        assert any(not c.in_order for c in ev.measured)
        shares.append(JITTERY.rate(result.pick) / optimum)
    assert min(shares) >= 0.95
    assert statistics.median(shares) >= 0.97


@dataclasses.dataclass(frozen=True)
class _HeadOfLine(CostModel):
    """A latency-bound source whose rare long stalls hold an in-order loader back: delivered in
    order, each worker count runs at ``ordered`` of its unordered rate, at most ``ordered_cap``,
    and its windows swing (``ordered_noise``) by whether a stall fell in them (the tuner_vs_grid
    jittery kind: 1 ms of CPU per item, 5% of items stall 100 ms)."""

    ordered: float = 0.5
    ordered_noise: float = 0.3
    ordered_cap: float = math.inf  # samples/s an in-order loader never passes

    def rate(self, config):
        rate = super().rate(config.replace(in_order=True))
        if config.in_order and config.num_workers > 1:
            return min(rate * self.ordered, self.ordered_cap)
        return rate

    def noise(self, config) -> float:
        return self.ordered_noise if config.in_order and config.num_workers > 1 else 0.03


HEAD_OF_LINE = _HeadOfLine(cpu_ms=1.0, wait_ms=5.0, spike_ms=100.0, spike_p=0.05, batch_size=16)


def _head_of_line_search(model: _HeadOfLine, seed: int):
    profile = model.profile()
    ev = SimulatedEvaluator(model.rate, seed=seed, noise_fn=model.noise)
    result = Search(
        ev,
        SearchSpace(cores=2, batch_size=16, max_workers=128),
        profile,
        baseline=LoaderConfig(batch_size=16),
        memory=MemoryBudget(budget_bytes=16_000 * MB, batch_bytes=profile.batch_bytes),
        settings=SearchSettings(budget_s=60.0, seed=seed),
    ).run()
    unordered = max(model.rate(c) for c in dense_space(model) if not c.in_order)
    return result, ev, model.rate(result.pick) / unordered


@pytest.mark.parametrize("seed", range(6))
def test_a_jittery_source_is_scanned_unordered(seed):
    # In order, the climb's windows are too noisy to tell 8 workers from 16 (the tuner_vs_grid
    # jittery kind, where 16 unordered ran 1.6x faster than the 8 the tuner kept).
    result, ev, share = _head_of_line_search(HEAD_OF_LINE, seed)
    assert result.region.name == "latency-bound" and HEAD_OF_LINE.profile().jittery
    climbed = [c for c in ev.measured[: len(result.trials)] if c.num_workers > 1]
    assert climbed and not climbed[0].in_order
    assert not result.pick.in_order
    assert share >= 0.9
    # What in-order delivery costs was measured, for the recommendation.
    assert any(e.knob == "in_order" and e.parent.in_order for e in result.effects)
    assert result.elapsed_s <= 60


def test_an_unordered_scan_races_in_order_delivery_before_giving_order_up():
    # Jittery in-process, yet in order costs nothing here (the prefetch queue absorbs the stalls):
    # the cheapest unordered finalist's in-order twin races, and a tie keeps the order.
    free = dataclasses.replace(HEAD_OF_LINE, ordered=1.0, ordered_noise=0.03)
    picks = [_head_of_line_search(free, seed)[0].pick for seed in range(8)]
    assert sum(p.in_order for p in picks) >= 4
    # Where in order costs half the rate, the race never keeps it.
    picks = [_head_of_line_search(HEAD_OF_LINE, seed)[0].pick for seed in range(8)]
    assert not any(p.in_order for p in picks)


@pytest.mark.parametrize("seed", range(6))
def test_workers_climb_again_once_out_of_order_delivery_is_kept(seed):
    # The in-process profile saw no jitter (the stalls come from elsewhere), so the scan runs in
    # order, where the rate stops growing at 8 workers; once the knob phase keeps in_order=False,
    # the worker counts are climbed again with it, and grow to the cores' limit.
    model = dataclasses.replace(
        HEAD_OF_LINE, spike_ms=0.0, spike_p=0.0, ordered_noise=0.03, ordered_cap=600.0
    )
    result, ev, share = _head_of_line_search(model, seed)
    assert not model.profile().jittery
    assert any("climbed again with in_order=False" in n for n in result.notes)
    assert not result.pick.in_order
    assert share >= 0.9
    assert result.elapsed_s <= 60


def test_memory_budget_caps_workers_and_is_never_exceeded():
    model = dataclasses.replace(LATENCY_BOUND, worker_mb=100.0, batch_mb=1.0)
    budget_mb = 700
    result, ev = _search(model, memory_mb=budget_mb)
    need = lambda c: c.num_workers * (100 * MB + (c.prefetch_factor or 2) * MB)  # noqa: E731
    assert all(need(c) <= budget_mb * MB for c in ev.measured if c.num_workers)
    assert result.pick.num_workers <= 6
    feasible = [c for c in dense_space(model, max_workers=16) if need(c) <= budget_mb * MB]
    assert model.rate(result.pick) >= 0.97 * max(model.rate(c) for c in feasible)
    assert any("memory budget" in note for note in result.notes)


def test_the_cap_note_names_the_limit_it_reached():
    # latency-bound: the climb wants far more workers than cores, and meets each limit in turn
    by_epoch, ev = _search(LATENCY_BOUND, max_workers=7, epoch_batches=7)
    assert max(c.num_workers for c in ev.measured) <= 7
    assert (
        "worker count capped at 7: one epoch holds 7 batches, and workers beyond them only wait"
        in by_epoch.notes
    )
    by_flag, _ = _search(LATENCY_BOUND, max_workers=6, epoch_batches=50)
    assert "worker count capped at 6: the most workers searched (--max-workers)" in by_flag.notes


@pytest.mark.parametrize("budget", [4.0, 12.0, 25.0])
def test_time_budget_bounds_the_search(budget):
    result, ev = _search(LATENCY_BOUND, budget_s=budget)
    # The two reference measurements always run; everything after them fits the budget.
    assert ev.clock <= max(budget, 2 * 1.0) + 0.5
    assert result.pick is not None
    # No confidence without two interleaved rounds; with them, a probability.
    if result.rounds < 2:
        assert result.confidence is None and not result.confirmed
    else:
        assert 0.0 <= result.confidence <= 1.0 and result.confirmed
    if budget < 10:
        assert any("time budget" in note for note in result.notes)


def test_small_budget_reports_no_confidence_and_what_it_skipped():
    result, _ = _search(LATENCY_BOUND, budget_s=6.0)
    assert result.rounds == 0
    assert result.confidence is None and not result.confirmed
    assert result.samples_per_s > 0
    data = result.to_dict()
    assert data["confidence"] is None and data["confirmed"] is False and data["rounds"] == 0
    assert result.skipped and all({"label", "why"} <= set(s) for s in result.skipped)
    assert any("time budget" in s["why"] for s in result.skipped)


def test_fixed_number_of_confirmation_rounds():
    result, _ = _search(CPU_BOUND, rounds=3)
    assert result.rounds == 3
    raced = [t for t in result.trials if t.phase == "confirm"]
    per_config = {}
    for t in raced:
        per_config[t.config] = per_config.get(t.config, 0) + 1
    # A B ... B A: two runs per config per round (the baseline joins the first round only).
    assert max(per_config.values()) == 6


@pytest.mark.parametrize("noise", [0.0, 0.08])
def test_quality_holds_without_and_with_heavy_noise(noise):
    for model in (CPU_BOUND, LATENCY_BOUND):
        result, _ = _search(model, noise=noise, seed=7)
        floor = 0.97 if noise == 0 else 0.93
        assert model.rate(result.pick) >= floor * _optimum(model)


def test_deterministic_for_a_seed():
    a, _ = _search(CPU_BOUND, seed=3)
    b, _ = _search(CPU_BOUND, seed=3)
    assert a.pick == b.pick and [t.samples_per_s for t in a.trials] == [
        t.samples_per_s for t in b.trials
    ]


def test_persistent_workers_recommended_on_the_measured_epoch_gap():
    # Room for the two race rounds and then the epoch-boundary measurement (the rounds come first).
    result, ev = _search(LATENCY_BOUND, budget_s=90.0)
    assert result.pick.persistent_workers
    assert result.startup_s is not None and result.startup_s > 0
    gap = result.persistent
    assert gap["recommended"] and gap["saved_s"] > 0.05
    assert gap["gap_without_s"] > gap["gap_with_s"]
    # Measured on the pick itself, with and without the flag.
    assert ev.epoch_gaps == [result.pick.replace(persistent_workers=False), result.pick]
    assert any("epoch boundary" in note for note in result.notes)


def test_a_loader_whose_own_call_cannot_persist_gets_the_gap_measured_beside_its_pick():
    # A factory that builds a DataLoader and takes no persistent_workers (NOTE [a DataLoader's
    # factory]): the gap is measured as before, recommended apart, and the pick stays callable.
    result, ev = _search(LATENCY_BOUND, budget_s=90.0, persistent_in_pick=False)
    assert result.pick.num_workers > 0 and not result.pick.persistent_workers
    assert result.persistent is not None and result.persistent["recommended"]
    assert ev.epoch_gaps == [result.pick, result.pick.replace(persistent_workers=True)]


def test_persistent_workers_not_recommended_when_restarts_cost_nothing():
    result, ev = _search(LATENCY_BOUND, startup=lambda c: 0.0)
    assert ev.epoch_gaps  # measured...
    assert not result.pick.persistent_workers  # ...and found not worth it
    assert result.persistent is not None and not result.persistent["recommended"]


def test_persistent_workers_not_recommended_unmeasured():
    # Workers that take long to start and a budget that the search uses up: no epoch-gap
    # measurement fits, so no persistent_workers.
    result, ev = _search(CPU_BOUND, budget_s=10.0, startup=lambda c: 0.1 + 0.6 * c.num_workers)
    assert result.pick.num_workers > 0 and not ev.epoch_gaps
    assert not result.pick.persistent_workers and result.persistent is None
    assert any("persistent" in s["label"] and "epoch-boundary" in s["why"] for s in result.skipped)


# -- pure pieces ---------------------------------------------------------------------------------


def _cfg(w: int, **kw) -> LoaderConfig:
    return LoaderConfig(num_workers=w, batch_size=8, **kw)


def _log(samples: dict[LoaderConfig, list[float]]) -> RaceLog:
    """One round per position: samples[c][i] is c's rate in round i."""
    log = RaceLog()
    for i in range(max(len(v) for v in samples.values())):
        log.add({c: [v[i]] for c, v in samples.items() if i < len(v)})
    return log


def test_decide_prefers_fewer_workers_on_a_plateau():
    samples = {_cfg(8): [100.0, 101.0, 99.5, 100.5], _cfg(16): [100.4, 101.2, 99.9, 100.6]}
    decision = decide(_log(samples))
    assert decision.leader == _cfg(16)
    assert decision.pick == _cfg(8)
    assert decision.confidence > 0.9


def test_decide_takes_the_clear_winner_with_high_confidence():
    samples = {_cfg(2): [50, 51, 49, 50.5], _cfg(4): [80, 81, 79, 80.5], _cfg(8): [78, 79, 80, 77]}
    decision = decide(_log(samples))
    assert decision.pick == _cfg(4)
    assert decision.confidence > 0.95
    assert decision.runner_up == _cfg(8)
    assert decision.margin == pytest.approx(80.25 / 78.5)
    lo, hi = decision.margin_interval
    assert lo <= decision.margin <= hi


def test_decide_is_unsure_when_the_rates_overlap():
    samples = {_cfg(2): [100, 70, 130, 95], _cfg(4): [60, 140, 90, 120]}
    assert decide(_log(samples)).confidence < 0.9


def test_no_confidence_below_two_rounds():
    one = _log({_cfg(2): [50.0], _cfg(4): [80.0]})
    decision = decide(one)
    assert (
        decision.pick == _cfg(4)
        and decision.confidence is None
        and decision.margin_interval is None
    )
    # Two rounds give a number, never a 95% one (test_tuning_confidence.py has the details).
    two = _log({_cfg(2): [50.0, 51.0], _cfg(4): [80.0, 81.0]})
    assert 0.5 < decide(two).confidence < 0.95


def test_bootstrap_pairs_the_rates_of_one_round():
    # The machine's load swings the rates 3x between rounds; within every round w=4 is 5% faster.
    # Paired by round that is certain; resampling rates independently would blur it.
    load = [1.0, 0.35, 1.6, 0.5, 1.3, 0.4]
    samples = {_cfg(2): [100 * f for f in load], _cfg(4): [105 * f for f in load]}
    decision = decide(_log(samples))
    assert decision.pick == _cfg(4)
    assert decision.confidence > 0.99
    lo, hi = decision.margin_interval
    assert lo < 1.05 < hi and lo > 1.0
    # The same load with the winner flipping between rounds (10% either way): not sure at all.
    flipped = {
        _cfg(2): [100 * f for f in load],
        _cfg(4): [100 * f * (1.1 if i % 2 else 1 / 1.1) for i, f in enumerate(load)],
    }
    assert decide(_log(flipped)).confidence < 0.9


def test_clearly_slower_needs_separation_beyond_noise():
    assert clearly_slower([0.90, 0.91, 0.89, 0.90], tolerance=0.01)
    assert not clearly_slower([0.99, 1.01, 1.0, 0.98], tolerance=0.01)


def test_classify_regions():
    latency = Profile(seconds_per_sample=0.02, cpu_per_wall=0.05)
    assert classify(latency, 50, 100, 2, 16).name == "latency-bound"
    assert classify(latency, 50, 100, 2, 16).predicted_workers == pytest.approx(40)
    cpu = Profile(seconds_per_sample=0.005, cpu_per_wall=0.98, collate_s=0.001)
    assert classify(cpu, 200, 390, 2, 32).name == "cpu-bound"
    tiny = Profile(seconds_per_sample=0.00001, cpu_per_wall=1.0, collate_s=0.0002)
    assert classify(tiny, 50_000, 40_000, 2, 64).name == "overhead-bound"


def test_memory_budget_arithmetic():
    mem = MemoryBudget(budget_bytes=1000 * MB, batch_bytes=10 * MB, worker_bytes=80 * MB)
    assert mem.need(_cfg(0)) == 0
    assert mem.need(_cfg(4, prefetch_factor=2)) == 4 * 100 * MB
    assert mem.max_workers(2) == 10
    assert mem.fits(_cfg(10)) and not mem.fits(_cfg(11))
    mem.observe(50 * MB)
    assert mem.measured and mem.worker_bytes == 50 * MB
    mem.observe(70 * MB)
    assert mem.worker_bytes == 70 * MB  # the largest measured worker counts


@dataclasses.dataclass(frozen=True)
class _ScaledAbove(CostModel):
    """The CPU-bound source with its rate from 2 workers on multiplied by ``factors`` (workers ->
    factor, the nearest count at or below): a flat step, a decline or a late gain, by design."""

    factors: tuple[tuple[int, float], ...] = ()

    def rate(self, config):
        base = CPU_BOUND.rate(config.replace(num_workers=min(config.num_workers, 2)))
        if config.num_workers < 2:
            return CPU_BOUND.rate(config)
        factor = 1.0
        for workers, f in self.factors:
            if config.num_workers >= workers:
                factor = f
        return base * factor


def _scaled(*factors):
    return _ScaledAbove(**dataclasses.asdict(CPU_BOUND), factors=factors)


def _climbed(ev):
    return sorted({c.num_workers for c in ev.measured if c.in_order and c.prefetch_factor == 2})


def test_a_flat_step_does_not_end_the_climb():
    # 2 and 4 workers read the same; 8 are 30% faster (what a busy machine's scheduler can give).
    result, ev = _search(_scaled((8, 1.3)), noise=0.0)
    assert 8 in _climbed(ev)
    assert result.pick.num_workers >= 8


def test_a_decline_ends_the_climb():
    result, ev = _search(_scaled((4, 0.7), (8, 1.3)), noise=0.0)
    assert max(_climbed(ev)) == 4
    assert result.pick.num_workers <= 3


def test_a_flat_step_at_four_times_the_cores_ends_the_climb():
    # 4 workers gain, 8 read flat at 4 x 2 cores: 16, faster again, is past the grid's range.
    result, ev = _search(_scaled((4, 1.2), (16, 1.5)), noise=0.0)
    assert max(_climbed(ev)) == 8


@dataclasses.dataclass(frozen=True)
class _KnobFactors(CostModel):
    """The CPU-bound source with a deeper prefetch and out-of-order delivery each multiplying its
    rate by a factor of their own."""

    deeper: float = 1.0
    unordered: float = 1.0

    def rate(self, config):
        rate = CPU_BOUND.rate(config.replace(prefetch_factor=2, in_order=True))
        if config.num_workers and (config.prefetch_factor or 2) > 2:
            rate *= self.deeper
        return rate * (self.unordered if not config.in_order else 1.0)


def _knob_search(**factors):
    result, ev = _search(_KnobFactors(**dataclasses.asdict(CPU_BOUND), **factors), noise=0.0)
    both = [c for c in ev.measured if (c.prefetch_factor or 2) > 2 and not c.in_order]
    return result, both


def test_two_knobs_that_read_level_are_measured_together():
    _, both = _knob_search()
    assert both


def test_a_deeper_prefetch_that_read_slower_is_not_combined():
    _, both = _knob_search(deeper=0.9)
    assert not both


def test_failed_trials_stop_the_climb_and_are_noted():
    model = LATENCY_BOUND

    def rate(config: LoaderConfig) -> float:
        return 0.0 if config.num_workers > 10 else model.rate(config)  # e.g. too many open files

    profile = model.profile()
    space = SearchSpace(cores=2, batch_size=model.batch_size, max_workers=128)
    memory = MemoryBudget(budget_bytes=16_000 * MB, batch_bytes=profile.batch_bytes)
    result = Search(
        SimulatedEvaluator(rate, seed=1),
        space,
        profile,
        baseline=LoaderConfig(batch_size=model.batch_size),
        memory=memory,
    ).run()
    assert result.pick.num_workers <= 10
    assert any("failed" in note for note in result.notes)
    assert any(not t.ok for t in result.trials)


def test_trial_dict_reports_memory_in_mb():
    t = Trial(_cfg(2), 10.0, "scale", worker_bytes=64 * MB)
    assert t.to_dict()["worker_mb"] == 64.0


# -- one winner, honest confidence, keep yours (issue 10) ------------------------------------------


def test_a_seed_races_head_to_head_with_its_role():
    # The sweep's best, in a shape the tuner would not scan itself (prefetch 4), races the
    # finalists.
    seed = LoaderConfig(num_workers=2, batch_size=CPU_BOUND.batch_size, prefetch_factor=4)
    result, ev = _search(CPU_BOUND, seeds=[(seed, "sweep-best")])
    assert seed in ev.measured
    rows = {r["label"]: r for r in result.head_to_head}
    assert rows[seed.label()]["role"] == "sweep-best" and rows[seed.label()]["rounds"] >= 1
    assert {r["role"] for r in result.head_to_head} >= {"sweep-best", "tuner"}
    # Every finalist of the head-to-head raced in the same rounds as the pick.
    assert result.rounds >= 2 and result.confidence is not None
    pick_row = max(result.head_to_head, key=lambda r: r["samples_per_s"])
    assert pick_row["rounds"] == result.rounds


def test_a_seed_labels_with_the_knobs_of_the_baselines_kind():
    """A sweep's config read back from its record carries no label knobs: raced beside the
    tuner's configs of a factory that takes only num_workers and batch_size, it must read
    'w=2 bs=N' as they do, not 'w=2 bs=N pf=4'."""
    knobs = ("num_workers", "batch_size")
    baseline = LoaderConfig(batch_size=CPU_BOUND.batch_size, label_knobs=knobs)
    seed = LoaderConfig(num_workers=2, batch_size=CPU_BOUND.batch_size, prefetch_factor=4)
    result, _ = _search(CPU_BOUND, baseline=baseline, seeds=[(seed, "sweep-best")])
    rows = {r["role"]: r for r in result.head_to_head}
    assert rows["sweep-best"]["label"] == f"w=2 bs={CPU_BOUND.batch_size}"
    assert all("pf=" not in r["label"] for r in result.head_to_head)


def test_keep_yours_when_the_baseline_is_as_good_as_the_best():
    model = CPU_BOUND
    best, _ = model.best_over(dense_space(model, max_workers=8))
    result, _ = _search(model, baseline=best, seed=2)
    assert result.keep_baseline
    assert result.within_pct is not None and result.within_pct < 5
    data = result.to_dict()
    assert data["keep_baseline"] is True and data["within_pct"] == pytest.approx(
        result.within_pct, abs=0.01
    )


def test_no_keep_yours_when_the_best_is_far_ahead():
    result, _ = _search(LATENCY_BOUND)
    assert not result.keep_baseline and result.within_pct > 50


def test_keeps_baseline_rule():
    assert keeps_baseline(101.0, 100.0)  # 1% gain: below the 3% floor
    assert keeps_baseline(105.0, 100.0, noise=0.08)  # below the race's own noise
    assert not keeps_baseline(110.0, 100.0, paired=[1.10, 1.09, 1.11])
    # A 10% median gain that one of three paired rounds contradicts: within noise.
    assert keeps_baseline(110.0, 100.0, paired=[1.12, 0.95, 1.10, 0.97])
    assert within_pct(100.0, 99.0) == pytest.approx(1.0)
    assert within_pct(100.0, 120.0) == 0.0


def test_slow_pipeline_plans_from_the_batch_time_and_stays_unconfirmed():
    # 0.3 s per batch in one process: a measurement of at least 8 batches takes seconds.
    slow = CostModel(cpu_ms=300.0 / 8, batch_size=8, collate_ms=0.0)
    result, ev = _search(slow, budget_s=20.0)
    plan = result.plan
    assert plan["batch_s"] == pytest.approx(0.3, rel=0.01)
    assert plan["window_batches"] == 8 and plan["measurement_s"] > 2.0
    assert plan["measurements_fit"] < 10 and not plan["confirmable"]
    assert plan["summary"] in result.notes
    assert ev.clock <= 20.0 + 3.5  # the forced reference measurements may overrun a little
    assert result.rounds < 2 and result.confidence is None and not result.confirmed
    assert result.skipped


def test_the_plan_is_revised_when_real_measurements_disagree():
    from stallscope.tuning.space import revise_plan

    plan = {"measurement_s": 35.0}
    note = revise_plan(
        plan, [5.0, 21.0, 4.0], left_s=20.0
    )  # the median: one slow baseline does not count
    assert plan["measured_measurement_s"] == 5.0
    assert (
        note.startswith("plan revised: the first measurements took 5.0 s each, not 35.0 s")
        and "about 4 more" in note
    )
    assert (
        revise_plan({"measurement_s": 4.0}, [5.0], left_s=20.0) is None
    )  # within 2x: the plan stands


def test_the_gain_over_the_users_config_gets_the_interval_of_the_rounds_they_raced():
    # The user's 2 workers are about 12% behind the best: close enough to race on, paired by round.
    result, _ = _search(
        CPU_BOUND, budget_s=60.0, baseline=LoaderConfig(num_workers=2, batch_size=32)
    )
    base = next(h for h in result.head_to_head if h["role"] == "baseline")
    assert not result.keep_baseline and base["rounds"] >= 2
    lo, hi = result.gain_interval
    assert 1.0 < lo < result.speedup < hi  # the medians' ratio inside the paired interval
    assert result.to_dict()["gain_interval"] == [round(lo, 4), round(hi, 4)]


def test_a_users_config_far_behind_still_gets_the_gain_an_interval():
    # The user's w=0, half the pick's rate: it races two rounds before it leaves (NOTE [the user's
    # config races]), and the gain is stated with the interval of those rounds.
    result, _ = _search(CPU_BOUND, budget_s=60.0)
    base = next(h for h in result.head_to_head if h["role"] == "baseline")
    assert base["rounds"] >= 2 and result.rounds >= 2
    lo, hi = result.gain_interval
    assert 1.5 < lo <= result.speedup <= hi


def test_no_gain_interval_when_the_budget_leaves_the_users_config_out():
    # A budget with room for two rounds of two configs only: the far-behind user's config is the
    # first left out, and the gain has no interval.
    result, _ = _search(CPU_BOUND, budget_s=30.0)
    assert result.rounds >= 2
    assert all(h["role"] != "baseline" or h["rounds"] < 2 for h in result.head_to_head)
    assert result.gain_interval is None


def test_every_config_keeps_what_the_loader_is_and_the_kinds_labels():
    # A loader that batches itself (webdataset's WebLoader, batch_size=None) tuned through a factory
    # that takes only num_workers: every config the search measures still batches itself and is
    # labelled by the factory's knob alone, so the race compares the baseline with itself under one
    # label, not "w=2" with a twin "w=2 bs=1 pf=2".
    baseline = LoaderConfig(
        num_workers=2,
        batch_size=CPU_BOUND.batch_size,
        batches_itself=True,
        label_knobs=("num_workers",),
    )
    result, ev = _search(CPU_BOUND, baseline=baseline)
    configs = [t.config for t in result.trials]
    assert configs and all(c.batches_itself for c in configs)
    assert all(c.label() == f"w={c.num_workers}" for c in [*configs, result.pick])
    assert sum(c == baseline for c in configs) >= 1


@pytest.mark.parametrize(
    ("lo", "hi", "mid"),
    [
        (0, 2, 1),
        (0, 8, 4),
        (2, 4, 3),
        (4, 8, 6),
        (4, 6, None),
        (6, 8, None),
        (16, 32, 24),
        (32, 91, 48),
        (32, 128, 64),
        (5, 20, 12),
    ],
)
def test_refine_midpoints_lie_on_one_ladder(lo, hi, mid):
    from stallscope.tuning.search import ladder_midpoint

    assert ladder_midpoint(lo, hi) == mid


@pytest.mark.parametrize("seed", range(6))
def test_two_runs_refine_on_the_same_counts(seed):
    # Whatever the noise made each run's best, every count a refine measured is on the ladder.
    ladder = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}
    for model in (CPU_BOUND, JITTERY, LATENCY_BOUND):
        result, _ = _search(model, seed=seed, noise=0.1)
        refined = {t.config.num_workers for t in result.trials if t.phase == "refine"}
        assert refined <= ladder
