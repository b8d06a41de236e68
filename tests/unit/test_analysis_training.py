"""Pure analysis: verdict inputs -> recommendations, ranks, timelines (exact numbers, no timing)."""

from __future__ import annotations

import pytest

from stallscope.analysis import training as analysis


def profile(
    stall: float,
    *,
    occupancy: float | None = None,
    data_ms: float = 10.0,
    compute_ms: float = 10.0,
    **extra,
):
    occ = (
        None
        if occupancy is None
        else {"capacity": 4, "mean_ready": occupancy * 4, "mean_fraction": occupancy}
    )
    base = {
        "stall_fraction": stall,
        "verdict": analysis.verdict_for(stall),
        "what_if_speedup": 1 / (1 - stall),
        "data_ms": {"mean": data_ms},
        "compute_ms": {"mean": compute_ms},
        "occupancy": occ,
    }
    base.update(extra)
    return base


def ids(recs):
    return [r["id"] for r in recs]


def test_input_bound_with_an_empty_buffer_hands_off_to_tune_with_numbers():
    recs = analysis.advise(
        profile(0.6, occupancy=0.05, data_ms=15, compute_ms=10),
        {"target": "p.py:make", "config": {"num_workers": 2}, "config_label": "w=2 bs=32 pf=2"},
    )
    assert ids(recs) == ["profile-input-bound"]
    rec = recs[0]
    assert rec["handoff"] == "stallscope tune p.py:make"
    assert (
        "60%" in rec["detail"]
        and "w=2 bs=32 pf=2" in rec["detail"]
        and "prefetch buffer" in rec["detail"]
    )
    assert "15.00 ms vs compute 10.00 ms" in rec["measured"] and "0.2/4" in rec["measured"]
    assert rec["expected_gain"] == "up to 2.50x faster steps if the loader kept up"
    sentence = analysis.next_knob(profile(0.6, occupancy=0.05, data_ms=15, compute_ms=10), recs)
    assert sentence.startswith(
        "input-bound: 60% of each step waits for data (15.00 ms data wait vs 10.00 ms compute)"
    )
    assert sentence.endswith("run `stallscope tune p.py:make`.")


def test_input_bound_without_workers_says_the_main_process_loads():
    recs = analysis.advise(profile(0.5), {"config": {"num_workers": 0}, "config_label": "w=0 bs=8"})
    assert "main process loads every batch itself" in recs[0]["detail"]


def test_input_bound_with_a_full_buffer_points_at_the_main_process():
    recs = analysis.advise(profile(0.4, occupancy=0.8), {})
    assert ids(recs) == ["profile-main-process-wait"]
    assert "80%" in recs[0]["detail"]


def test_compute_bound_with_a_full_buffer_has_spare_loader_capacity():
    recs = analysis.advise(profile(0.01, occupancy=0.95), {"config": {"num_workers": 8}})
    assert ids(recs) == ["profile-spare-loader-capacity"]
    assert "fewer than 8 workers" in recs[0]["detail"]
    assert analysis.next_knob(profile(0.01), []).endswith(
        "The loader keeps up; speed up the model step instead."
    )


def test_startup_rule_uses_the_share_of_a_real_epoch():
    quiet = analysis.advise(
        profile(
            0.01,
            first_batch_s=2.0,
            startup_share=0.5,
            startup_share_per_epoch=0.01,
            epoch_steps=1000,
        ),
        {},
    )
    assert quiet == []
    loud = analysis.advise(
        profile(
            0.01, first_batch_s=2.0, startup_share=0.5, startup_share_per_epoch=0.2, epoch_steps=40
        ),
        {"config": {"num_workers": 4, "persistent_workers": False}},
    )
    assert ids(loud) == ["profile-epoch-startup"]
    assert (
        "persistent_workers=True" in loud[0]["detail"]
        and "an epoch of 40 steps" in loud[0]["detail"]
    )


def test_gpu_underused_while_compute_bound():
    recs = analysis.advise(profile(0.01, gpu_util=35.0), {})
    assert ids(recs) == ["profile-gpu-underused"]
    assert analysis.advise(profile(0.01, gpu_util=95.0), {}) == []


def test_ranks_name_the_slowest_and_the_maximum_exposed_wait():
    ranks = [
        {"rank": 0, "data_wait_ms_per_step": 2.0, "data_wait_s": 0.1, "stall_fraction": 0.1},
        {"rank": 1, "data_wait_ms_per_step": 30.0, "data_wait_s": 1.5, "stall_fraction": 0.9},
        {"rank": 2, "data_wait_ms_per_step": None, "data_wait_s": None, "stall_fraction": None},
    ]
    report = analysis.rank_report(ranks)
    assert report["slowest_rank"] == 1 and report["world_size"] == 3
    assert report["max_data_wait_ms_per_step"] == 30.0 and report["max_exposed_data_wait_s"] == 1.5
    assert report["spread_ms_per_step"] == 28.0 and report["job_verdict"] == "input-bound"
    recs = analysis.advise(profile(0.1, distributed=report), {})
    assert recs[0]["id"] == "profile-straggler-rank" and "Rank 1" in recs[0]["title"]
    assert analysis.rank_report([{"rank": 0, "data_wait_ms_per_step": None}]) is None


@pytest.mark.parametrize(
    ("cores", "local", "workers"), [(16, 4, 3), (2, 2, 1), (8, 1, 7), (64, 8, 7), (1, 4, 1)]
)
def test_workers_per_rank(cores, local, workers):
    assert analysis.workers_per_rank(cores, local) == workers


def test_workers_per_rank_advice_when_local_ranks_oversubscribe():
    recs = analysis.advise(
        profile(0.01), {"cores": 16, "local_world_size": 4, "config": {"num_workers": 8}}
    )
    assert ids(recs) == ["profile-workers-per-rank"]
    assert (
        "at most 3 loader workers per rank" in recs[0]["title"]
        and "36 busy processes" in recs[0]["detail"]
    )
    assert (
        analysis.advise(
            profile(0.01), {"cores": 16, "local_world_size": 4, "config": {"num_workers": 3}}
        )
        == []
    )


def test_judged_profile_judges_from_the_measurements_alone():
    """A profile section says what it measured; the verdict, the ranks compared and the memory
    drift come from analysis, by today's rules, whatever a saved record says of them."""
    ranks = [
        {
            "rank": 0,
            "data_wait_ms_per_step": 2.0,
            "data_wait_s": 0.1,
            "stall_fraction": 0.02,
            "windows": [{"index": 0, "data_wait_s": 0.1, "stall_fraction": 0.02}],
        },
        {
            "rank": 1,
            "data_wait_ms_per_step": 30.0,
            "data_wait_s": 1.5,
            "stall_fraction": 0.9,
            "verdict": "compute-bound",  # stale: judged again from its stall fraction
            "windows": [{"index": 0, "data_wait_s": 1.5, "stall_fraction": 0.9}],
        },
    ]
    grows = [
        {
            "index": i,
            "end_step": 10 * (i + 1),
            "end_s": 60.0 * (i + 1),
            "main_rss_mb": 100.0 + 40 * i,
        }
        for i in range(6)
    ]
    saved = {"stall_fraction": 0.6, "verdict": "compute-bound", "ranks": ranks, "windows": grows}
    judged = analysis.judged_profile(saved)
    assert judged["verdict"] == "input-bound" and judged["thresholds"] == analysis.thresholds()
    assert [r["verdict"] for r in judged["ranks"]] == ["compute-bound", "input-bound"]
    assert judged["distributed"]["slowest_rank"] == 1
    assert judged["distributed"]["windows"][0]["slowest_rank"] == 1
    assert judged["memory_drift"]["verdict"] == "growing"
    assert saved["verdict"] == "compute-bound"  # the input is left as it was
    # Without the measurements there is nothing to judge again: no verdict is made up.
    assert analysis.judged_profile({"stall_fraction": None})["verdict"] is None


def test_balanced_with_a_full_buffer_points_at_the_main_process():
    recs = analysis.advise(profile(0.08, occupancy=0.9, data_ms=1.6, compute_ms=25.0), {})
    assert ids(recs) == ["profile-main-process-wait"]
    assert "90% full on average" in recs[0]["detail"]
    assert analysis.advise(profile(0.08, occupancy=0.3), {}) == []
