"""ss.tune on small real pipelines: the profile, the record section, the recommendations."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import TensorDataset
from tune_pipelines import ArrayDataset, WaitingDataset

import stallscope as ss
from stallscope.analysis import recommendations
from stallscope.errors import UsageError
from stallscope.target import pipeline_from_object
from stallscope.tuning.tuner import profile_pipeline


def _pipeline(dataset, batch_size):
    pipeline = pipeline_from_object(dataset)
    pipeline.batch_size = batch_size
    pipeline.baseline = pipeline.baseline.replace(batch_size=batch_size)
    return pipeline


def test_profile_sees_a_waiting_fetch_as_latency_bound():
    profile, check = profile_pipeline(_pipeline(WaitingDataset(n=64, wait_s=0.01), 8))
    assert profile.cpu_per_wall < 0.3  # sleeping releases the CPU
    assert 0.009 < profile.seconds_per_sample < 0.05
    assert profile.batch_bytes == 8 * 16 * 4 + 8 * 8
    assert check is None  # a batch costs 80 ms: not in-memory, batched fetch not probed


def test_profile_finds_the_vectorised_fetch_and_its_in_process_gain():
    profile, check = profile_pipeline(_pipeline(ArrayDataset(n=4096), 128))
    assert profile.batched_fetch == "array-index" and check.fetch is not None
    assert profile.batched_speedup > 3  # 128 __getitem__ calls + collate vs one fancy-indexing call
    # CPU work, not waiting: about 0.95 on an idle machine, far above a waiting fetch's ~0.02 (the
    # run-queue correction is imperfect when other processes hold the cores).
    assert profile.cpu_per_wall > 0.3


def test_tune_on_in_memory_tensors_measures_batched_fetching():
    dataset = TensorDataset(torch.randn(4096, 8), torch.arange(4096))
    result = ss.tune(dataset, batch_size=64, budget_s=6.0, compare_start_methods=False)
    assert result.tuning_seconds < 6.0 + 4.0
    batched = [
        t for t in result.trials if t.config.batched_fetch and t.config.num_workers == 0 and t.ok
    ]
    plain = [t for t in result.trials if t.config == result.baseline and t.ok]
    assert batched and plain
    # Indexing once per batch beats 64 __getitem__ calls + collate by far, even on a loaded machine.
    assert max(t.samples_per_s for t in batched) > 2 * max(t.samples_per_s for t in plain)
    section = json.loads(json.dumps(result.to_dict()))
    assert {"baseline", "best", "trials", "tuning_seconds", "search"} <= set(section)
    assert "recommendations" not in section  # the tuner records measurements; analysis advises
    assert section["best"]["config"]["batched_fetch"] is True
    assert any(r.id == "batched-fetch" for r in result.recommendations())


def test_tune_rejects_bad_arguments():
    with pytest.raises(UsageError):
        ss.tune(WaitingDataset(n=8), budget_s=0)
    with pytest.raises(UsageError):
        ss.tune(WaitingDataset(n=8), max_workers=-1)
    with pytest.raises(UsageError):
        ss.tune(WaitingDataset(n=8), batch_size=64)  # larger than the dataset


_GAP = {
    "measured_on": "w=4 bs=8 pf=2",
    "gap_without_s": 0.52,
    "gap_with_s": 0.04,
    "saved_s": 0.48,
    "recommended": True,
}


def _section(
    effects=(),
    noise=0.02,
    speedup=2.0,
    region="cpu-bound",
    workers=4,
    gap=_GAP,
    confidence=0.93,
    rounds=3,
    keep=False,
):
    best_cfg = {"num_workers": workers, "persistent_workers": True}
    return {
        "baseline": {
            "config": {"num_workers": 0, "persistent_workers": False},
            "label": "w=0 bs=8",
            "samples_per_s": 100.0,
        },
        "best": {
            "config": best_cfg,
            "label": f"w={workers} bs=8 pf=2 persistent",
            "samples_per_s": 100.0 * speedup,
            "speedup": speedup,
            "confidence": confidence,
            "rounds": rounds,
            "keep_baseline": keep,
            "within_pct": (1 - 1 / speedup) * 100,
        },
        "trials": [
            {"config": {"num_workers": 2}, "phase": "scale", "error": None, "samples_per_s": 90.0}
        ],
        "search": {
            "noise": noise,
            "effects": list(effects),
            "region": {"name": region},
            "space": {"cores": 2},
            "startup_s": 0.4,
            "profile": {"cpu_per_wall": 0.05},
            "persistent_workers": gap,
        },
    }


def _effect(knob, gain, source="confirm"):
    return {
        "knob": knob,
        "gain": gain,
        "source": source,
        "variant": "v",
        "parent": "p",
        "variant_samples_per_s": 100 * (1 + gain),
        "parent_samples_per_s": 100.0,
    }


def _ids(section):
    return [r.id for r in recommendations(section)]


def test_recommendations_carry_their_measured_gain():
    section = _section([_effect("batched_fetch", 0.8), _effect("in_order", 0.12, "scan")])
    assert _ids(section) == [
        "loader-config",
        "batched-fetch",
        "in-order-false",
        "persistent-workers",
    ]
    recs = [r for r in recommendations(section) if r.source == "text"]
    assert [r.id for r in recs] == ["loader-config", "batched-fetch", "in-order-false"]
    for rec in recs:
        assert rec.measured and rec.expected_gain
    assert recs[0].expected_gain == "2.00x throughput"
    assert recs[1].expected_gain == "+80% throughput"


def test_a_knob_whose_variant_raced_the_pick_and_lost_is_not_advised_beside_it():
    # in_order=False gained 4.3% at w=2 before the race; w=2 unordered then raced w=4 (in order)
    # and lost: telling the user to set it beside the w=4 pick would contradict the race.
    effect = dict(_effect("in_order", 0.043), variant="w=2 bs=8 pf=2 unordered")
    section = _section([effect])
    assert "in-order-false" in _ids(section)
    section["best"]["head_to_head"] = [
        {"config": {"num_workers": 4}, "label": "w=4 bs=8 pf=2", "samples_per_s": 200.0},
        {"config": {"num_workers": 2}, "label": "w=2 bs=8 pf=2 unordered", "samples_per_s": 190},
    ]
    assert "in-order-false" not in _ids(section)
    # The pick is that variant (raced without the persistent workers added after): it won, and the
    # knob that made it is still said with its measured gain.
    section["best"]["config"] = {"num_workers": 2, "in_order": False, "persistent_workers": True}
    section["best"]["head_to_head"][1]["config"] = {"num_workers": 2, "in_order": False}
    assert "in-order-false" in _ids(section)


def test_keep_yours_within_the_noise():
    # A 2% gain is inside the tie margin: the one "keep yours" rule says so (doctor reads the
    # same rule), and no knob that changes the steady state is recommended either.
    section = _section(
        [_effect("in_order", 0.04, "scan"), _effect("batched_fetch", 0.02)], speedup=1.02
    )
    recs = recommendations(section)
    assert [r.id for r in recs] == ["keep-yours", "persistent-workers"]
    assert "a gain the noise (3%) could make alone" in recs[0].detail


def test_persistent_workers_only_with_its_measured_gap():
    # A start-up time alone is no evidence: without the epoch-boundary measurement, no
    # recommendation.
    assert "persistent-workers" not in _ids(_section(gap=None))
    not_worth_it = dict(_GAP, recommended=False, gap_without_s=0.05, saved_s=0.01)
    assert "persistent-workers" not in _ids(_section(gap=not_worth_it))
    rec = next(r for r in recommendations(_section()) if r.id == "persistent-workers")
    assert (rec.values["gap_without_s"], rec.values["gap_with_s"]) == (0.52, 0.04)
    assert rec.values["saved_s"] == 0.48
    # Users who already keep their workers alive are not told to.
    section = _section()
    section["baseline"]["config"]["persistent_workers"] = True
    assert "persistent-workers" not in _ids(section)


def test_keep_yours_recommends_no_change():
    recs = recommendations(_section([_effect("in_order", 0.3)], speedup=1.01, keep=True, gap=None))
    assert [r.id for r in recs] == ["keep-yours"]
    assert (
        "within 1.0% of the best found" in recs[0].detail
        and "no change is recommended" in recs[0].detail
    )


def test_unconfirmed_pick_says_so():
    rec = recommendations(_section(confidence=None, rounds=1))[0]
    assert rec.id == "loader-config"
    assert "not confirmed: the budget ran out after 1 interleaved round(s)" in rec.measured
    assert "confidence" not in rec.measured


def test_beyond_cores_recommendation_for_latency_bound_picks():
    recs = recommendations(_section(region="latency-bound", workers=32, speedup=20.0))
    beyond = [r for r in recs if r.id == "workers-beyond-cores"]
    assert beyond and "32 on 2" in beyond[0].title and "90.0 with 2" in beyond[0].measured


def test_a_replaying_iterable_dataset_is_not_tuned_into_duplicates():
    from tune_pipelines import ReplayingStream

    result = ss.tune(ReplayingStream(), batch_size=16, budget_s=3.0)
    assert all(t.config.num_workers == 0 for t in result.trials)
    assert result.config.num_workers == 0
    assert any("get_worker_info" in note for note in result.search.notes)


def test_rate_error_by_batch_means_ignores_steady_bursts():
    from stallscope.tuning.tuner import _relative_se

    bursty_but_steady = [
        0.1,
        0.1,
        0.1,
        30.0,
    ] * 8  # many workers: a burst of ready batches, then a wait
    assert _relative_se(bursty_but_steady) == pytest.approx(0.0, abs=1e-9)
    drifting = (
        [1.0] * 8 + [2.0] * 8 + [1.0] * 8 + [2.0] * 8
    )  # the rate itself changes within the window
    assert _relative_se(drifting) > 0.1
    assert _relative_se([1.0] * 15) is None  # too few batches to say


def test_emit_keeps_the_users_config_when_the_best_is_within_noise():
    from stallscope.commands.tune import emitted_config
    from stallscope.config import LoaderConfig

    base = LoaderConfig(num_workers=2, batch_size=8)
    best = LoaderConfig(num_workers=3, batch_size=8)
    section = {
        "baseline": {"config": base.to_dict(), "label": base.label(), "samples_per_s": 99.0},
        "best": {
            "config": best.to_dict(),
            "label": best.label(),
            "samples_per_s": 100.0,
            "speedup": 1.01,
            "keep_baseline": True,
            "within_pct": 1.0,
            "rounds": 3,
            "confidence": 0.55,
        },
    }
    config, comment = emitted_config("t.py:fn", section)
    assert config == base
    assert "Keep yours: your loader is within 1.0% of the best found" in comment
    # Not flagged by the tuner, but 1% is inside the noise: the same "keep yours" rule as doctor's.
    section["best"]["keep_baseline"] = False
    config, comment = emitted_config("t.py:fn", section)
    assert config == base and "a gain the noise (3%) could make alone" in comment
    section["best"].update(speedup=1.5, samples_per_s=148.5)
    config, comment = emitted_config("t.py:fn", section)
    assert config == best and "confidence 55%" in comment and "3 interleaved rounds" in comment


def test_a_search_where_every_trial_failed_is_an_error_not_a_pick(monkeypatch):
    from stallscope.errors import PipelineError
    from stallscope.tuning import search as search_module

    real_run = search_module.Search.run

    def every_trial_failed(self, on_plan=None):
        result = real_run(self, on_plan=on_plan)
        for trial in result.trials:
            trial.samples_per_s, trial.error = 0.0, "DataLoader worker (pid 1) exited unexpectedly"
        result.samples_per_s = 0.0
        return result

    monkeypatch.setattr(search_module.Search, "run", every_trial_failed)
    with pytest.raises(
        PipelineError,
        match="no configuration tried delivered a batch .the first failure: DataLoader",
    ):
        ss.tune(
            TensorDataset(torch.randn(256, 4)),
            batch_size=16,
            budget_s=2.0,
            compare_start_methods=False,
        )
