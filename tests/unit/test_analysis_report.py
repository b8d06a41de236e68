"""Report analysis: exact facts from small hand-made records (no measurement, no clock)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stallscope import analysis as an
from stallscope.analysis.checklist_rules import check_batch_time_consistency, check_data_wait
from stallscope.analysis.training import profile_verdict
from stallscope.render.console_table import plain
from stallscope.render.document_checks import recommendation_parts
from stallscope.thresholds import INPUT_BOUND_AT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"record_{name}.json").read_text())


def cfg(w: int, bs: int = 10, pf: int | None = 2, **extra) -> dict:
    return {
        "num_workers": w,
        "batch_size": bs,
        "prefetch_factor": pf if w else None,
        "persistent_workers": False,
        "pin_memory": False,
        "in_order": True,
        "multiprocessing_context": None,
        "batched_fetch": False,
        "torch_threads": None,
        **extra,
    }


def result(config: dict, rate: float, **extra) -> dict:
    base = {
        "config": config,
        "samples_per_s": {"median": rate, "min": rate * 0.98, "max": rate * 1.01},
        "startup_s": 0.5,
        "batch_ms": {"p50": 40.0, "p95": 60.0},
        "noise": 0.03,
        "error": None,
    }
    base.update(extra)
    return base


def bench_record(**extra) -> dict:
    record = {
        "command": "bench",
        "target": "t.py:f",
        "host": {"cores": 4, "memory_available_bytes": 8_000_000, "shm_free_bytes": 1_000_000},
        "dataset": {"length": 1000, "batch_bytes": 1000, "batch_size": 10},
        "results": [
            result(cfg(0), 100.0, speedup=1.0, efficiency=1.0),
            result(
                cfg(2),
                250.0,
                speedup=2.5,
                efficiency=1.25,
                resources={
                    "main_cpu_percent": 20.0,
                    "workers_cpu_percent": 180.0,
                    "workers_rss_mb": 2.0,
                },
            ),
        ],
        "scaling": {"cores": 4, "best_index": 1, "plateau_workers": 2},
    }
    record.update(extra)
    return record


def test_best_configuration_from_the_sweep_is_measured_against_single_process():
    best = an.best_configuration(bench_record())
    assert best.source == "bench"
    assert best.label == "w=2 bs=10 pf=2"
    assert best.samples_per_s == 250.0
    assert best.baseline.label == "w=0 bs=10" and best.baseline.samples_per_s == 100.0
    assert best.speedup == 2.5


def test_best_configuration_prefers_the_tuner_and_computes_missing_speedup():
    record = bench_record(
        baseline={"config": cfg(1), "samples_per_s": 80.0},
        best={"config": cfg(2), "samples_per_s": 240.0},
        trials=[],
    )
    best = an.best_configuration(record)
    assert best.source == "tune"
    assert best.speedup == pytest.approx(3.0)
    assert best.result.to_dict() == record["results"][1]  # the sweep measured the same config


def test_epoch_estimate_is_length_over_rate():
    epoch = an.epoch_estimate(bench_record())
    assert epoch.length == 1000
    best, baseline = epoch.rows
    assert (best.role, best.seconds, best.batches, best.startup_s) == (
        "fastest in the sweep",
        4.0,
        100,
        0.5,
    )
    assert (baseline.role, baseline.seconds) == ("baseline", 10.0)
    assert epoch.saving_s == 6.0


def test_epoch_estimate_needs_the_dataset_length():
    record = bench_record()
    record["dataset"]["length"] = None
    assert an.epoch_estimate(record) is None
    del record["dataset"]
    assert an.epoch_estimate(record) is None


def test_memory_facts_scales_batch_bytes_to_the_batch_size():
    record = bench_record()
    record["results"][1]["config"] = cfg(4, bs=20, pf=3)
    budget = an.memory_facts(record)
    row = budget.rows[0]
    assert (row.role, row.workers, row.prefetch_factor, row.batch_size) == (
        "fastest in the sweep",
        4,
        3,
        20,
    )
    assert row.batch_bytes == 2000.0  # 1000 bytes at batch size 10 -> 2000 at 20
    assert row.in_flight_batches == 12
    assert row.in_flight_bytes == 24000.0
    assert row.shm_fraction == pytest.approx(0.024)
    assert row.ram_needed_bytes == 24000.0 + 2.0 * 1024 * 1024
    assert row.ram_fraction == pytest.approx((24000.0 + 2.0 * 1024 * 1024) / 8_000_000)


def test_memory_facts_absent_without_batch_bytes_or_workers():
    record = bench_record()
    del record["dataset"]["batch_bytes"]
    assert an.memory_facts(record) is None
    only_zero = bench_record(results=[result(cfg(0), 100.0)])
    only_zero["scaling"]["best_index"] = 0
    assert an.memory_facts(only_zero) is None


def test_cpu_use_is_a_share_of_the_usable_cores():
    cpu = an.cpu_use(bench_record())
    assert cpu.focus.label == "w=2 bs=10 pf=2"
    assert cpu.focus.total_percent == 200.0
    assert cpu.focus.capacity_fraction == 0.5  # 200% of 4 cores × 100%


@pytest.mark.parametrize(("p95", "status"), [(48.0, "pass"), (100.0, "warn"), (160.0, "fail")])
def test_batch_time_consistency_check(p95, status):
    record = bench_record()
    record["results"][1]["batch_ms"] = {"p50": 40.0, "p95": p95}
    row = check_batch_time_consistency(record)
    assert row.measured == pytest.approx(p95 / 40.0)
    assert row.status == status
    assert row.subject == "w=2 bs=10 pf=2"


def test_data_wait_check_and_the_verdict_are_judged_by_todays_threshold():
    # The input-bound threshold is the pass boundary: a run the verdict calls input-bound never
    # passes the checklist.
    record = {"stall_fraction": 0.2, "verdict": "balanced", "thresholds": {"input_bound_at": 0.25}}
    row = check_data_wait(record)
    assert (row.target.good, row.target.bad) == (INPUT_BOUND_AT, 0.5)
    assert row.status == "warn"
    # An older record judged by another threshold is judged again: its stored verdict is not read.
    assert profile_verdict(record) == "input-bound"
    assert profile_verdict({"stall_fraction": 0.01, "verdict": "balanced"}) == "compute-bound"
    assert profile_verdict({"verdict": "balanced"}) == "balanced"  # no fraction: what it stored


def test_checklist_rules_run_in_order_and_skip_missing_data():
    rows = an.checklist(bench_record())
    names = [row.name for row in rows]
    assert names == [
        "Batch-time consistency (p95/p50)",
        "Parallel efficiency",
        "Measurement noise (max−min)/median",
        "Headroom over the baseline (best ÷ baseline)",
        "In-flight batches / free /dev/shm",
        "Workers + in-flight batches / available RAM",
        "Worker start-up / epoch time",
    ]
    startup = rows[-1]
    assert startup.measured == pytest.approx(0.5 / 4.0) and startup.status == "warn"
    assert an.checklist(bench_record(), rules=[check_data_wait]) == []


def test_verdict_rules_first_match_wins():
    record = bench_record()
    assert an.verdict(record).label == "loader-limited"
    record["results"][1]["samples_per_s"]["median"] = 105.0
    record["results"][1]["speedup"] = 1.05
    assert an.verdict(record).label == "near-optimal"
    record["stall_fraction"], record["verdict"] = 0.5, "input-bound"
    assert an.verdict(record).label == "input-bound"
    record["findings"] = [{"code": "hang", "severity": "error", "message": "m"}]
    v = an.verdict(record)
    assert (v.label, v.values["errors"], v.values["codes"]) == ("unsafe", 1, ["hang"])


def test_one_rule_per_advice_over_the_measurements_only():
    record = bench_record()
    # A start-up time is no measurement of persistent_workers: only the epoch-boundary gap is.
    assert [r.id for r in an.recommendations(record)] == ["use-best-config"]
    record["search"] = {
        "persistent_workers": {
            "measured_on": "w=2 bs=10 pf=2",
            "gap_without_s": 0.6,
            "gap_with_s": 0.1,
            "saved_s": 0.5,
            "recommended": True,
        }
    }
    record["best"] = {"config": cfg(2), "samples_per_s": 250.0}
    record["baseline"] = {"config": cfg(0), "samples_per_s": 100.0}
    # The tuner's pick and baseline: its own verdict, the speed-up read from the two rates.
    ids = [r.id for r in an.recommendations(record)]
    assert ids == ["loader-config", "persistent-workers"]
    assert an.recommendations(record)[0].expected_gain == "2.50x throughput"
    rec = an.recommendations(record)[1]
    assert (rec.values["gap_without_s"], rec.values["gap_with_s"], rec.values["saved_s"]) == (
        0.6,
        0.1,
        0.5,
    )
    assert rec.values["epoch_s"] == pytest.approx(4.0)
    # The gain is a share of an epoch with the gap in it, never of the loading alone.
    assert plain(recommendation_parts(rec)).endswith(
        "Expected gain: 500 ms per epoch after the first, of a 4.60 s epoch without it "
        "(4.00 s of loading at this rate, plus the gap)."
    )
    # With its rounds and confidence recorded: still one recommendation each.
    record["best"].update(speedup=2.5, label="w=2 bs=10 pf=2", rounds=3, confidence=0.9)
    recs = an.recommendations(record)
    assert [(r.id, r.source) for r in recs] == [
        ("loader-config", "text"),
        ("persistent-workers", "analysis"),
    ]
    # A training-loop profile that measured the epoch start-up says persistent_workers itself.
    record.update(
        stall_fraction=0.02,
        verdict="compute-bound",
        first_batch_s=2.0,
        startup_share=0.2,
        config=cfg(2),
    )
    assert [r.id for r in an.recommendations(record)] == ["loader-config", "profile-epoch-startup"]


def test_memory_growth_is_projected_over_an_epoch_and_the_workers():
    record = bench_record(
        findings=[
            {
                "code": "memory-growth",
                "severity": "warning",
                "message": "grows",
                "evidence": {"mb_per_1000_samples": 4.0},
            }
        ]
    )
    view = an.finding_facts(record).findings[0]
    assert view.derived == {
        "mb_per_1000": 4.0,
        "epoch_samples": 1000.0,
        "epoch_mb_per_worker": 4.0,
        "workers": 2.0,
        "epoch_mb_all_workers": 8.0,
    }


def test_findings_sorted_by_severity_and_counted():
    record = fixture("check")
    facts = an.finding_facts(record)
    severities = [f.severity for f in facts.findings]
    assert severities == sorted(severities, key=lambda s: an.SEVERITY_ORDER[s])
    written = [f["severity"] for f in record["findings"]]
    assert "error" in written
    assert facts.counts == {s: written.count(s) for s in ("error", "warning", "info")}


def test_stage_shares_accept_percentages():
    record = {
        "stages": [
            {"name": "decode", "ms_per_sample": 3.0, "share": 75.0},
            {"name": "collate", "ms_per_sample": 1.0, "share": 25.0},
        ]
    }
    facts = an.stage_facts(record)
    assert [r.share for r in facts.rows] == [0.75, 0.25]
    assert facts.total_ms == 4.0 and facts.top.name == "decode"


def test_best_configuration_snippet_is_the_code_that_ran():
    """NOTE [verified snippets]: reports print the advice's code only where it ran, for
    that config."""
    pick = cfg(4, in_order=False, persistent_workers=True)
    code = (
        "from m import pad\nloader = DataLoader(d, batch_size=10, collate_fn=pad, num_workers=4)\n"
    )
    record = {
        "best": {"config": pick},
        "baseline": {"config": cfg(1)},
        "loader_code": {"config": pick, "python": code, "verified": True},
    }
    assert an.loader_snippet(record, pick) == code
    assert an.loader_snippet(record, cfg(1)) == ""  # code for another config is not this one's
    record["loader_code"] = {
        "config": pick,
        "python": None,
        "verified": False,
        "reason": "running it raised TypeError",
    }
    assert an.loader_snippet(record, pick) == ""
    assert an.loader_snippet({}, {}) == ""


def test_training_facts_prefer_steady_state_means():
    record = fixture("profile")
    t = an.training_facts(record)
    assert t.mean_data_ms == record["data_ms"]["mean"]
    assert t.config_label == record["config_label"]
    del record["data_ms"]
    t = an.training_facts(record)
    data = record["step_timeline"]["data_ms"]
    assert t.mean_data_ms == pytest.approx(sum(data) / len(data))


def test_a_record_without_sections_has_no_facts():
    facts = an.report_facts({"command": "bench", "target": "t", "host": {"cores": 2}})
    assert (
        facts.verdict is None and facts.bench is None and facts.best is None and facts.cpu is None
    )
    assert facts.checklist == [] and facts.recommendations == [] and facts.findings is None


@pytest.mark.parametrize(
    "name", ["bench", "tune", "check", "stages", "profile", "compare", "doctor"]
)
def test_analysis_is_pure(name):
    record = fixture(name)
    before = copy.deepcopy(record)
    an.report_facts(record)
    assert record == before


def test_trials_by_config_takes_the_median_of_each_configs_runs():
    trials = [
        {
            "label": "w=2",
            "phase": "profile",
            "samples_per_s": 100.0,
            "startup_s": 0.5,
            "error": None,
        },
        {
            "label": "w=4",
            "phase": "coarse",
            "samples_per_s": 300.0,
            "startup_s": 1.0,
            "error": None,
        },
        {"label": "w=4", "phase": "final", "samples_per_s": 200.0, "startup_s": 2.0, "error": None},
        {"label": "w=4", "phase": "final", "samples_per_s": 260.0, "startup_s": 3.0, "error": None},
        {"label": "w=8", "phase": "coarse", "samples_per_s": None, "error": "worker died"},
    ]
    rows = an.trials_by_config(trials)
    assert [r["label"] for r in rows] == ["w=4", "w=2", "w=8"]  # fastest first, failed last
    w4 = rows[0]
    assert w4["rate"] == 260.0 and w4["startup_s"] == 2.0 and w4["phases"] == ["coarse", "final"]
    assert len(w4["rates"]) == 3 and w4["error"] is None
    assert rows[2]["rate"] is None and rows[2]["error"] == "worker died"


# -- one winner, keep yours (issue 10) -------------------------------------------------------------


def _doctor_record(
    tune_rate: float, raced: list[dict], keep: bool = False, within: float | None = None
) -> dict:
    """A sweep whose best is w=2 at 250/s, and a tune section whose pick is w=3 at ``tune_rate``."""
    return bench_record(
        baseline={"config": cfg(0), "label": "w=0 bs=10", "samples_per_s": 100.0},
        best={
            "config": cfg(3),
            "label": "w=3 bs=10 pf=2",
            "samples_per_s": tune_rate,
            "speedup": tune_rate / 100,
            "rounds": 3,
            "confidence": 0.95,
            "head_to_head": raced,
            "keep_baseline": keep,
            "within_pct": within,
        },
        trials=[],
        search={"noise": 0.02},
        recommendations=[{"id": "loader-config", "title": "Use the tuned DataLoader settings"}],
    )


def test_the_tuner_pick_stands_when_it_raced_the_sweeps_best():
    raced = [
        {"config": cfg(3), "samples_per_s": 231.0, "rounds": 3, "role": "tuner"},
        {"config": cfg(2), "samples_per_s": 225.0, "rounds": 3, "role": "sweep-best"},
    ]
    best = an.best_configuration(_doctor_record(231.0, raced))
    assert best.source == "tune" and best.label == "w=3 bs=10 pf=2" and best.overruled is None
    # The epoch and memory tables name it as the verdict does: the pick, never "best".
    assert [row.role for row in an.epoch_estimate(_doctor_record(231.0, raced)).rows] == [
        "pick",
        "baseline",
    ]
    assert an.memory_facts(_doctor_record(231.0, raced)).rows[0].role == "pick"
    facts = an.tuning_facts(_doctor_record(231.0, raced))
    assert [(r.label, r.role, r.rounds) for r in facts.head_to_head] == [
        ("w=3 bs=10 pf=2", "tuner", 3),
        ("w=2 bs=10 pf=2", "sweep-best", 3),
    ]


def test_an_unraced_faster_sweep_best_overrules_the_tuner_pick():
    # 250/s in the sweep vs 200/s for the pick, and they never met: the report names the sweep's
    # best.
    record = _doctor_record(
        200.0, [{"config": cfg(3), "samples_per_s": 200.0, "rounds": 2, "role": "tuner"}]
    )
    best = an.best_configuration(record)
    assert best.source == "bench" and best.label == "w=2 bs=10 pf=2"
    assert best.overruled.label == "w=3 bs=10 pf=2"
    ids = [r.id for r in an.recommendations(record)]
    assert "loader-config" not in ids and "use-best-config" in ids
    # Within the noise (250 vs 245), the pick keeps its place.
    assert an.best_configuration(_doctor_record(245.0, [])).source == "tune"


def test_keep_yours_recommends_the_users_own_config():
    record = _doctor_record(
        101.0,
        [
            {"config": cfg(3), "samples_per_s": 101.0, "rounds": 3, "role": "tuner"},
            {"config": cfg(0), "samples_per_s": 100.0, "rounds": 3, "role": "baseline"},
        ],
        keep=True,
        within=1.0,
    )
    record["results"] = record["results"][:1]  # a sweep that found nothing faster either
    record["scaling"]["best_index"] = 0
    record["recommendations"] = [{"id": "keep-yours", "title": "Keep your DataLoader settings"}]
    best = an.best_configuration(record)
    assert best.keep_baseline and best.label == "w=0 bs=10" and best.within_pct == 1.0
    assert best.best_found.label == "w=3 bs=10 pf=2"
    v = an.verdict(record)
    assert v.label == "near-optimal" and v.values["keep_baseline"] and v.values["within_pct"] == 1.0
    assert [r.id for r in an.recommendations(record)] == ["keep-yours"]
    assert [row.role for row in an.epoch_estimate(record).rows] == ["yours, kept"]
