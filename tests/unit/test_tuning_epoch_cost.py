"""Short epochs: the per-epoch rate decides the pick (NOTE [per-epoch rate] in
``tuning/epoch_cost.py``), on a simulated cost model with a fake clock and on fake trials."""

from __future__ import annotations

import pytest
from report_numbers import visible_html_text
from tune_costmodel import CPU_BOUND, CostModel
from tune_simulated import SimulatedEvaluator

from stallscope.analysis.run_verdict import decide
from stallscope.analysis.sections import tuning_facts, unraced_faster_sweep_best
from stallscope.analysis.tune_rules import epoch_rule, keeps_yours
from stallscope.commands.tune import emitted_config
from stallscope.config import LoaderConfig
from stallscope.render.console import ConsoleRenderer
from stallscope.render.html import HTMLRenderer
from stallscope.render.markdown import MarkdownRenderer
from stallscope.tuning.epoch_cost import EPOCH_SHARE, epoch_cost
from stallscope.tuning.search import Search
from stallscope.tuning.space import MB, MemoryBudget, SearchSettings, SearchSpace
from stallscope.tuning.trial import Trial
from stallscope.tuning.tuner import TuneResult


def _startup(config: LoaderConfig) -> float:
    """Workers that take a while to start: 0.02 s, plus 0.05 s per worker."""
    return 0.02 + 0.05 * config.num_workers


def _search(
    model: CostModel,
    *,
    epoch_samples: int | None,
    baseline: LoaderConfig | None = None,
    seed: int = 0,
    noise: float = 0.03,
    budget_s: float = 60.0,
    cycled: bool = False,
    can_persist: bool = True,
):
    profile = model.profile()
    space = SearchSpace(
        cores=model.cores,
        batch_size=model.batch_size,
        max_workers=64,
        persistent_workers=can_persist,
    )
    memory = MemoryBudget(budget_bytes=int(16_000 * MB), batch_bytes=profile.batch_bytes)
    ev = SimulatedEvaluator(
        model.rate,
        noise=noise,
        seed=seed,
        startup_fn=_startup,
        worker_bytes_fn=model.worker_bytes,
        epoch_samples=epoch_samples,
        cycled=cycled,
    )
    result = Search(
        ev,
        space,
        profile,
        baseline=baseline or LoaderConfig(batch_size=model.batch_size),
        memory=memory,
        settings=SearchSettings(budget_s=budget_s, seed=seed),
    ).run()
    return result


def _per_epoch(model: CostModel, config: LoaderConfig, samples: int) -> float:
    """The truth per epoch: an epoch start costs 1.5 start-ups (SimulatedEvaluator's model)."""
    return samples / (1.5 * _startup(config) + samples / model.rate(config))


def _best_per_epoch(model: CostModel, samples: int) -> float:
    return max(
        _per_epoch(model, LoaderConfig(num_workers=w, batch_size=model.batch_size), samples)
        for w in range(0, 17)
    )


# -- the search -----------------------------------------------------------------------------


def test_without_epoch_ends_many_workers_win_the_steady_state():
    # The old rule, and still the rule where no epoch ends within a window.
    result = _search(CPU_BOUND, epoch_samples=None)
    assert result.pick.num_workers >= 2
    assert result.epochs is None


@pytest.mark.parametrize("seed", range(3))
def test_short_epochs_the_per_epoch_rate_decides(seed):
    # 3-batch epochs: the 2+ workers that win the steady state (~970 vs 492 samples/s) restart
    # every epoch (0.17 s and more), so a single process delivers the most per epoch.
    samples = 3 * CPU_BOUND.batch_size
    result = _search(CPU_BOUND, epoch_samples=samples, seed=seed)
    assert result.pick.num_workers == 0
    assert _per_epoch(CPU_BOUND, result.pick, samples) >= 0.95 * _best_per_epoch(CPU_BOUND, samples)
    epochs = result.epochs
    assert epochs is not None and epochs["decides"]
    assert epochs["samples_per_epoch"] == samples and epochs["batches_per_epoch"] == 3
    # A raced many-worker config is recorded faster in steady state, slower per epoch.
    rows = {row["workers"]: row for row in epochs["configs"]}
    many = max(rows)
    assert many >= 2
    assert rows[many]["steady_samples_per_s"] > rows[0]["steady_samples_per_s"]
    assert rows[many]["per_epoch_samples_per_s"] < rows[0]["per_epoch_samples_per_s"]
    assert rows[many]["startup_share"] >= EPOCH_SHARE and rows[many]["restart_measured"]
    # The rate reported is still the steady state's (start-up apart, SPEC §3.1).
    assert result.samples_per_s == pytest.approx(CPU_BOUND.rate(result.pick), rel=0.1)


def test_short_epochs_switch_away_from_many_workers():
    # The user's loader starts 8 workers every 3-batch epoch: fewer is the advice, with the gain
    # per epoch, although 8 workers are faster in steady state.
    samples = 3 * CPU_BOUND.batch_size
    eight = LoaderConfig(num_workers=8, batch_size=CPU_BOUND.batch_size)
    result = _search(CPU_BOUND, epoch_samples=samples, baseline=eight)
    assert not result.keep_baseline
    assert result.pick.num_workers < 8
    assert _per_epoch(CPU_BOUND, result.pick, samples) > 1.2 * _per_epoch(CPU_BOUND, eight, samples)
    epochs = result.epochs
    assert epochs["decides"] and epochs["speedup"] > 1.2
    assert epochs["pick"] == result.pick.label()


def test_with_no_round_raced_the_scan_decides_per_epoch_too():
    # A budget that fits the scan but no race round: the single measurements pick, on the same
    # rule (the old one picked 2 workers here, faster in steady state).
    samples = 3 * CPU_BOUND.batch_size
    steady = _search(CPU_BOUND, epoch_samples=None, budget_s=4.0)
    assert steady.rounds == 0 and steady.pick.num_workers == 2
    result = _search(CPU_BOUND, epoch_samples=samples, budget_s=4.0)
    assert result.rounds == 0
    assert result.pick.num_workers == 0
    assert result.epochs["decides"] and result.epochs["pick"] == result.pick.label()
    assert result.samples_per_s == pytest.approx(CPU_BOUND.rate(result.pick), rel=0.1)


def test_long_epochs_change_nothing():
    # Epochs of a million samples: start-up is a negligible share, the steady state decides, and
    # the pick is the one the search makes without any epoch figures (same seed, no noise).
    plain = _search(CPU_BOUND, epoch_samples=None, noise=0.0)
    long = _search(CPU_BOUND, epoch_samples=1_000_000, noise=0.0)
    assert long.pick == plain.pick and long.pick.num_workers >= 2
    assert long.keep_baseline == plain.keep_baseline
    assert long.epochs is not None and not long.epochs["decides"]
    assert "pick" not in long.epochs


# -- the cost itself, on fake trials --------------------------------------------------------


def _trial(workers: int, rate: float, *, restart=None, startup=0.1, epoch=512) -> Trial:
    return Trial(
        LoaderConfig(num_workers=workers, batch_size=8),
        rate,
        "confirm",
        startup_s=startup,
        epoch_samples=epoch,
        epoch_batches=None if epoch is None else epoch // 8,
        restart_s=restart,
    )


def test_per_epoch_rate_from_the_measured_restart():
    zero, eight = _trial(0, 4200.0, restart=0.002), _trial(8, 5000.0, restart=0.11)
    cost = epoch_cost([zero, eight], {zero.config: 4200.0, eight.config: 5000.0})
    assert cost is not None and cost.decides and cost.batches == 64
    assert cost.trial_rate(eight) == pytest.approx(512 / (0.11 + 512 / 5000))
    assert cost.trial_rate(zero) > cost.trial_rate(eight)
    assert cost.measured[eight.config]


def test_a_config_without_an_epoch_start_reuses_its_start_up():
    seen, unseen = _trial(0, 4200.0, restart=0.0), _trial(8, 5000.0, startup=0.3, epoch=None)
    cost = epoch_cost([seen, unseen], {seen.config: 4200.0, unseen.config: 5000.0})
    assert cost is not None
    # Its start-up less the steady time of one of its batches (8 samples at 5,000/s).
    assert cost.restart_s[unseen.config] == pytest.approx(0.3 - 8 / 5000)
    assert not cost.measured[unseen.config]


def test_a_single_process_first_batch_is_no_epoch_start_cost():
    # A 7-batch epoch of 32-sample batches at 330 samples/s, single-process: its time to the first
    # batch (0.1 s) is that batch's own fetch, not a start-up an epoch pays on top. Counted whole,
    # it would be 14% of the epoch and make the per-epoch rate decide.
    zero = Trial(
        LoaderConfig(num_workers=0, batch_size=32),
        330.0,
        "confirm",
        startup_s=0.1,
        epoch_samples=200,
        epoch_batches=7,
    )
    four = LoaderConfig(num_workers=4, batch_size=32)
    cost = epoch_cost([zero], {zero.config: 330.0, four: 600.0}, can_persist=True)
    assert cost is not None and cost.restart_s[zero.config] < 0.02
    assert not cost.decides


def test_no_epoch_end_no_cost():
    trials = [_trial(0, 4200.0, epoch=None), _trial(8, 5000.0, epoch=None)]
    assert epoch_cost(trials, {t.config: t.samples_per_s for t in trials}) is None


def test_a_small_share_does_not_decide():
    # 0.2 s of start-up over an epoch of 100,000 samples at 5,000/s (20 s): 1%.
    two = _trial(2, 5000.0, restart=0.2, epoch=100_000)
    cost = epoch_cost([two], {two.config: 5000.0})
    assert cost is not None and cost.share(two.config) < EPOCH_SHARE and not cost.decides


# -- what the verdict says ------------------------------------------------------------------


def _record(epoch_samples: int | None, baseline: LoaderConfig | None = None) -> dict:
    """The tune section a search on the simulated model writes (as ``tune --json`` does)."""
    result = _search(CPU_BOUND, epoch_samples=epoch_samples, baseline=baseline)
    return TuneResult(
        config=result.pick,
        samples_per_s=result.samples_per_s,
        baseline=result.baseline,
        baseline_samples_per_s=result.baseline_samples_per_s,
        confidence=result.confidence,
        tuning_seconds=result.elapsed_s,
        search=result,
        profile=CPU_BOUND.profile(),
        space=SearchSpace(cores=CPU_BOUND.cores, batch_size=CPU_BOUND.batch_size, max_workers=64),
    ).to_dict()


EIGHT = LoaderConfig(num_workers=8, batch_size=CPU_BOUND.batch_size)


def test_the_verdict_says_the_rate_per_epoch_decided():
    record = _record(3 * CPU_BOUND.batch_size, baseline=EIGHT)
    v = decide(record)
    assert v.action == "switch" and v.config["num_workers"] < 8
    assert v.decided_by.startswith("epochs are 3 batches (96 samples); each restarts ")
    assert "the rate per epoch, start-ups included, decides" in v.decided_by
    assert v.measurement.startswith("per epoch, start-ups included: the tuner's race")
    # The gain is per epoch: the steady state's ratio is below 1 (8 workers are faster there).
    assert record["best"]["speedup"] < 1 < v.gain
    epochs = record["search"]["epochs"]
    assert v.samples_per_s == epochs["pick_samples_per_s"]
    assert v.baseline_samples_per_s == epochs["baseline_samples_per_s"]
    assert not keeps_yours(record)  # the rule tune --emit and doctor both read
    # Every renderer's verdict says it, and tune --emit's comment too.
    for text in (
        ConsoleRenderer(width=400).render(record),
        MarkdownRenderer().render(record),
        visible_html_text(HTMLRenderer(plots=False).render(record)),
    ):
        assert "Epochs are 3 batches (96 samples); each restarts " in text
    _, comment = emitted_config("pipeline:make_loader", record)
    assert "samples/s per epoch, start-ups included" in comment
    assert "Epochs are 3 batches" in comment


def test_a_steady_state_sweep_row_does_not_overrule_a_per_epoch_pick():
    record = _record(3 * CPU_BOUND.batch_size, baseline=EIGHT)
    # The sweep's fastest row, never raced, far faster in steady state than the per-epoch pick.
    four = LoaderConfig(num_workers=4, batch_size=CPU_BOUND.batch_size).to_dict()
    record["results"] = [
        {"config": four, "label": "w=4 bs=32 pf=2", "samples_per_s": {"median": 990.0}}
    ]
    record["best"]["head_to_head"] = [
        h for h in record["best"]["head_to_head"] if h["config"] != four
    ]
    assert unraced_faster_sweep_best(record, tuning_facts(record)) is None
    assert decide(record).config == record["best"]["config"]


def test_long_epochs_the_verdict_is_the_steady_states():
    v = decide(_record(1_000_000))
    assert v.decided_by is None
    assert not v.measurement.startswith("per epoch")


def test_a_saved_record_with_few_epoch_figures_still_reads():
    # A record another version wrote: one raced config, no steady rates, no pick named.
    record = {
        "search": {
            "epochs": {
                "decides": True,
                "samples_per_epoch": 512,
                "configs": [{"label": "w=8", "workers": 8, "per_epoch_samples_per_s": 2478.0}],
            }
        }
    }
    rule = epoch_rule(record)
    assert rule is not None
    assert rule.sentence.startswith("epochs are 512 samples; each restarts 8 workers of w=8")
    assert rule.speedup is None
    assert epoch_rule({"search": {"epochs": {"decides": False}}}) is None
    assert epoch_rule({}) is None


def test_a_noisy_tie_that_kept_the_slower_median_says_so():
    rows = [
        {"label": "w=4", "workers": 4, "per_epoch_samples_per_s": 251.0, "startup_share": 0.2},
        {"label": "w=0", "workers": 0, "per_epoch_samples_per_s": 193.0, "startup_share": 0.0},
    ]
    epochs = {"decides": True, "samples_per_epoch": 238, "configs": rows, "pick": "w=0"}
    record = {"search": {"epochs": epochs}, "best": {"tie": True}}
    assert epoch_rule(record).sentence.endswith("so the cheaper config was kept")
    record["best"]["tie"] = False
    assert "cheaper config" not in epoch_rule(record).sentence


# -- a DataLoader whose epochs stallscope walks back to back ----------------------------------


def test_a_cycled_dataloader_is_compared_in_steady_state_and_its_workers_persist():
    # 3-batch epochs of a DataLoader (sampler cycled: the window sees no epoch start) that takes
    # persistent_workers: workers win the steady state, and the pick keeps them across epochs, so
    # a loop re-iterating it never pays their start-up again.
    samples = 3 * CPU_BOUND.batch_size
    result = _search(CPU_BOUND, epoch_samples=samples, cycled=True)
    assert result.pick.num_workers >= 2 and result.pick.persistent_workers
    assert result.epochs is not None and not result.epochs["decides"]
    assert CPU_BOUND.rate(result.pick) > 1.5 * CPU_BOUND.rate(LoaderConfig(batch_size=16))


def test_a_cycled_loader_that_cannot_persist_pays_its_start_up_every_epoch():
    samples = 3 * CPU_BOUND.batch_size
    result = _search(CPU_BOUND, epoch_samples=samples, cycled=True, can_persist=False)
    assert result.pick.num_workers == 0
    assert result.epochs["decides"]
    rows = {row["workers"]: row for row in result.epochs["configs"]}
    assert not rows[max(rows)]["restart_measured"]  # its start-up stands for the epoch's start


def _bare_search(
    trials: list[Trial], rates: dict[LoaderConfig, float], *, budget_s: float, startup=None
) -> Search:
    profile = CPU_BOUND.profile()
    space = SearchSpace(cores=2, batch_size=16, max_workers=8)
    memory = MemoryBudget(budget_bytes=int(16_000 * MB), batch_bytes=profile.batch_bytes)
    search = Search(
        SimulatedEvaluator(CPU_BOUND.rate, startup_fn=startup),
        space,
        profile,
        baseline=LoaderConfig(batch_size=16),
        memory=memory,
        settings=SearchSettings(budget_s=budget_s),
    )
    search.trials = trials
    search.rate = rates.__getitem__  # type: ignore[method-assign]
    return search


def test_a_pick_whose_start_up_is_a_share_of_its_epoch_persists_when_the_gap_was_not_measured():
    from stallscope.tuning.persistence import measure_persistent

    four = LoaderConfig(num_workers=4, batch_size=16)
    trial = Trial(four, 6400.0, "confirm", startup_s=0.05, epoch_samples=512, epoch_batches=32)
    # No budget left for the epoch-boundary gap. 512 samples at 6,400/s: 0.08 s an epoch; 0.05 s
    # of start-up is 38% of it.
    search = _bare_search([trial], {four: 6400.0}, budget_s=0.0)
    pick, evidence = measure_persistent(search, four)
    assert pick == four.replace(persistent_workers=True) and evidence is None
    assert any("38% of the epoch" in note for note in search.notes)
    assert not any("not recommended" in note for note in search.notes)
    # A gap the epoch-boundary phase measured decides instead (here it saves nothing)...
    measured = _bare_search([trial], {four: 6400.0}, budget_s=60.0, startup=lambda c: 0.0)
    pick, evidence = measure_persistent(measured, four)
    assert pick == four and evidence is not None and evidence["gap_without_s"] is not None
    # ...and a long epoch changes nothing.
    long = Trial(four, 6400.0, "confirm", startup_s=0.05, epoch_samples=512_000)
    unmeasured = _bare_search([long], {four: 6400.0}, budget_s=0.0)
    assert measure_persistent(unmeasured, four) == (four, None)
    assert any("not recommended" in note for note in unmeasured.notes)


def test_a_saving_small_in_seconds_but_large_for_a_short_epoch_recommends_persistence():
    from stallscope.throughput.epochs import EpochGap
    from stallscope.tuning.persistence import choose_persistent

    four = LoaderConfig(num_workers=4, batch_size=16)
    without = EpochGap(four, [0.04, 0.042], batches_per_epoch=32)
    with_ = EpochGap(four.replace(persistent_workers=True), [0.004, 0.005], batches_per_epoch=32)
    notes: list[str] = []
    kept, evidence = choose_persistent(four, without, with_, note=notes.append)
    assert kept == four and not evidence["recommended"]  # 0.037 s saved: below 0.05 s
    chosen, evidence = choose_persistent(four, without, with_, note=notes.append, epoch_s=0.08)
    assert chosen.persistent_workers and evidence["recommended"]


def test_the_epoch_sentence_names_a_factorys_defaults_as_yours():
    # A factory-built loader whose own defaults (no workers) won per epoch: the sentence labels
    # that config as every other surface does, "yours (make_loader's defaults)", not "bs=32".
    yours = {"num_workers": 0, "batch_size": 32, "label_knobs": ["num_workers"]}
    one = {**yours, "num_workers": 1}
    rows = [
        {"config": yours, "label": "bs=32", "workers": 0, "per_epoch_samples_per_s": 306.0},
        {"config": one, "label": "w=1 bs=32", "workers": 1, "per_epoch_samples_per_s": 156.0},
    ]
    epochs = {"decides": True, "batches_per_epoch": 8, "samples_per_epoch": 256, "configs": rows}
    record = {
        "search": {"epochs": {**epochs, "pick": "bs=32", "steady_leader": "w=1 bs=32"}},
        "loader_kind": {"name": "factory"},
        "loader": {"origin": "make_loader()", "knobs": yours},
        "baseline": {"config": yours, "samples_per_s": 325.0},
    }
    sentence = epoch_rule(record).sentence
    assert "yours (make_loader's defaults) 306 vs w=1 bs=32 156" in sentence, sentence
    assert " bs=32 306" not in sentence
