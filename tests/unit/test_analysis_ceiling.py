"""The ceiling and the cores needed (analysis/ceiling.py) from hand-made records: exact numbers;
the free-data replay with a fake clock."""

from __future__ import annotations

import pytest

from stallscope.analysis.ceiling import (
    ceiling_facts,
    ceiling_section,
    ceiling_sections,
    cores_needed_section,
    target_rate_of,
)
from stallscope.training.replay import replay_free_data


def config(workers: int, bs: int = 32) -> dict:
    return {
        "num_workers": workers,
        "batch_size": bs,
        "prefetch_factor": 2 if workers else None,
        "persistent_workers": False,
        "pin_memory": False,
        "in_order": True,
        "multiprocessing_context": None,
    }


def result(
    workers: int, rate: float, efficiency: float | None, main_ms: float | None, bs: int = 32
) -> dict:
    return {
        "config": config(workers, bs),
        "label": f"w={workers} bs={bs}",
        "samples_per_s": {"median": rate, "min": rate, "max": rate},
        "efficiency": efficiency,
        "main_ms_per_batch": main_ms,
        "noise": 0.01,
    }


def bench_record(
    cpu_s: float = 0.0025,
    wall_s: float = 0.0025,
    main_ms: float = 0.5,
    rate: float = 750.0,
    efficiency: float = 0.9375,
) -> dict:
    """2 usable cores; single process 400/s; the pick w=2 at ``rate``."""
    return {
        "command": "bench",
        "host": {"cores": 2},
        "results": [result(0, 400.0, 1.0, None), result(2, rate, efficiency, main_ms)],
        "scaling": {"cores": 2, "best_index": 1, "single_process_ms_per_sample": 2.5},
        "cpu_cost": {
            "cpu_s_per_sample": cpu_s,
            "wall_s_per_sample": wall_s,
            "batch_size": 32,
            "usable_cores": 2,
        },
    }


def test_cpu_bound_ceiling_is_cores_over_cpu_per_sample():
    c = ceiling_section(bench_record())
    assert c["basis"] == "cpu"
    assert c["samples_per_s"] == pytest.approx(800.0)  # 2 cores / 2.5 ms
    assert c["pick_fraction"] == pytest.approx(750.0 / 800.0)
    assert c["main_process_samples_per_s"] == pytest.approx(32 / 0.0005)  # 64,000/s: not the limit
    assert c["pick_label"] == "w=2 bs=32" and c["pick_samples_per_s"] == 750.0


def test_main_process_ceiling_wins_when_receiving_is_slower_than_the_cores():
    # 0.1 ms CPU per sample: 20,000/s on 2 cores; receiving costs 2 ms per batch of 32: 16,000/s.
    c = ceiling_section(bench_record(cpu_s=0.0001, main_ms=2.0, rate=15000.0))
    assert c["basis"] == "main-process"
    assert c["samples_per_s"] == pytest.approx(16000.0)
    assert c["cpu_samples_per_s"] == pytest.approx(20000.0)
    assert c["pick_fraction"] == pytest.approx(15000.0 / 16000.0)


def cheap_samples_record() -> dict:
    """Samples so cheap (2.6 µs of CPU) that receiving a batch of 32 from a worker (0.37 ms of the
    main process's CPU: 86,486/s) costs more than making it; the pick runs without workers."""
    record = bench_record(cpu_s=2.6e-6, wall_s=7.3e-6, main_ms=0.37, rate=12000.0)
    record["results"][0]["samples_per_s"] = {"median": 130000.0, "min": 1.2e5, "max": 1.4e5}
    record["scaling"]["best_index"] = 0
    return record


def test_a_pick_without_workers_is_held_to_one_process_not_to_what_workers_can_hand_over():
    c = ceiling_section(cheap_samples_record())
    assert c["pick_label"] == "w=0 bs=32"
    assert c["main_process_samples_per_s"] == pytest.approx(32 / 0.00037, rel=1e-4)
    assert c["basis"] == "one-process"
    assert c["samples_per_s"] == pytest.approx(1 / 2.6e-6, rel=1e-4)  # 384,615/s
    assert c["pick_fraction"] == pytest.approx(130000.0 * 2.6e-6, rel=1e-3)  # 33.8%, not 150%
    record = cheap_samples_record()
    record.update(ceiling_sections(record))
    sentence = ceiling_facts(record).ceiling_sentence
    assert "33.8% of this machine's ceiling of 384,615 samples/s" in sentence
    assert "one process making every sample itself at 0.0026 ms of CPU each" in sentence
    assert "0.37 ms of CPU per batch of 32" in sentence


def test_a_pick_faster_than_one_process_at_one_thread_is_held_to_the_cores():
    # The pick at 400,000/s beats one process's 384,615/s (more intra-op threads than the probe's
    # one): the cores' bound, 769,231/s, is the ceiling it is held to.
    record = cheap_samples_record()
    record["results"][0]["samples_per_s"] = {"median": 4e5, "min": 4e5, "max": 4e5}
    record.update(ceiling_sections(record))
    facts = ceiling_facts(record)
    assert facts.ceiling["basis"] == "cpu"
    assert facts.ceiling["pick_fraction"] == pytest.approx(4e5 * 2.6e-6 / 2, rel=1e-3)


def saturated_record(pick_cpu_ms: float) -> dict:
    """The demo's shape at 1faab48: the probe read 3.37 ms of CPU per sample (594/s on 2 cores),
    the pick w=2 ran at 666/s, its own windows at ``pick_cpu_ms`` per sample."""
    record = bench_record(cpu_s=0.00337, wall_s=0.00337, rate=666.0)
    record["results"][1]["cpu_ms_per_sample"] = pick_cpu_ms
    return record


def test_a_pick_that_kept_every_core_busy_past_the_probes_ceiling_is_the_ceiling():
    record = saturated_record(3.0)  # 666/s x 3.0 ms: 2.00 of 2 cores busy
    c = ceiling_section(record)
    assert c["basis"] == "saturated"
    assert c["samples_per_s"] == pytest.approx(666.0) and c["pick_fraction"] == 1.0
    assert c["cpu_samples_per_s"] == pytest.approx(2 / 0.00337, rel=1e-4)  # what the probe allowed
    record.update(ceiling_sections(record))
    facts = ceiling_facts(record)
    assert facts.problem is None
    assert "its own windows kept 2.00 of the 2 usable cores busy" in facts.ceiling_sentence
    assert "more workers cannot help" in facts.ceiling_sentence


def test_a_pick_past_the_probes_ceiling_with_cores_to_spare_is_still_a_bug_caught():
    record = saturated_record(2.4)  # 1.60 of 2 cores busy: the cores did not bound it
    assert ceiling_section(record)["basis"] == "cpu"
    record.update(ceiling_sections(record))
    facts = ceiling_facts(record)
    assert facts.ceiling is None and facts.problem is not None


def test_cores_needed_is_target_times_cpu_per_sample_over_the_picks_efficiency():
    n = cores_needed_section(bench_record(), 5000.0)
    assert n["cores"] == pytest.approx(5000 * 0.0025 / 0.9375, abs=0.01)  # 13.33
    assert n["usable_cores"] == 2 and n["short_by"] == pytest.approx(13.33 - 2, abs=0.01)
    # 750/s against 2 × 1 / 2.5 ms: the probe's single-process time at one intra-op thread
    assert n["efficiency"] == pytest.approx(0.9375) and n["efficiency_of"] == "w=2 bs=32"
    assert n["efficiency_from"] == "rate" and n["sweep_efficiency"] == 0.9375
    assert n["target_source"] == "--target-rate"


def test_where_the_picks_cpu_was_measured_efficiency_is_cpu_in_one_process_over_cpu_at_the_pick():
    r = bench_record()
    r["results"][1]["cpu_ms_per_sample"] = 2.8  # main process and workers, per sample, at w=2
    r["trials"] = [
        {"config": config(2), "samples_per_s": 700.0, "cpu_ms_per_sample": 3.0},
        {"config": config(4), "samples_per_s": 600.0, "cpu_ms_per_sample": 9.0},
    ]
    n = cores_needed_section(r, 5000.0)
    assert n["efficiency_from"] == "cpu" and n["pick_cpu_ms_per_sample"] == pytest.approx(
        2.9
    )  # median of 2.8, 3.0
    # busy cores = rate × CPU per sample: 750/s × 2.9 ms = 2.18, never more than the 2 usable
    assert ceiling_section(r)["pick_cpu_cores"] == 2.0
    assert n["efficiency"] == pytest.approx(2.5 / 2.9, abs=1e-4)
    assert n["cores"] == pytest.approx(
        5000 * 0.0029, abs=0.01
    )  # target × the CPU each sample costs at the pick
    r.update(ceiling_sections(r, 5000.0))
    assert ceiling_facts(r).cores_sentence.startswith(
        "At 5,000 samples/s this pipeline needs 14.5 cores (5,000 samples/s × 2.50 ms of CPU per "
        "sample in one process ÷ 86.2% CPU efficiency of w=2 bs=32, whose processes spend 2.90 "
        "ms of CPU per sample)"
    )


def test_an_efficiency_above_one_saves_waits_not_cpu():
    # A latency-bound pick: 2 workers deliver 3× what 2 processes of 2.5 ms wall per sample could.
    n = cores_needed_section(bench_record(rate=2400.0), 1000.0)
    assert n["efficiency"] == pytest.approx(3.0)
    assert n["efficiency_used"] == 1.0 and n["cores"] == pytest.approx(2.5)


def test_the_sweeps_efficiency_where_no_single_process_time_was_probed():
    r = bench_record(efficiency=0.8)
    del r["cpu_cost"]["wall_s_per_sample"]
    n = cores_needed_section(r, 1000.0)
    assert n["efficiency"] == 0.8 and n["efficiency_from"] == "sweep"
    assert n["cores"] == pytest.approx(1000 * 0.0025 / 0.8, abs=0.01)


def test_without_a_sweep_the_efficiency_comes_from_the_probes_single_process_time():
    r = {
        "command": "tune",
        "host": {"cores": 2},
        "baseline": {"config": config(0), "samples_per_s": 400.0},
        "best": {"config": config(4), "samples_per_s": 700.0, "speedup": 1.75},
        "trials": [
            {"config": config(4), "samples_per_s": 690.0, "main_ms_per_batch": 0.4},
            {"config": config(4), "samples_per_s": 700.0, "main_ms_per_batch": 0.6},
            {"config": config(0), "samples_per_s": 400.0, "main_ms_per_batch": None},
        ],
        "cpu_cost": {"cpu_s_per_sample": 0.0025, "wall_s_per_sample": 0.0025},
    }
    c = ceiling_section(r)
    assert c["main_ms_per_batch"] == pytest.approx(0.5)  # the pick's trials, median
    n = cores_needed_section(r, 5000.0)
    # ideal at 4 workers on 2 cores: 2 / 2.5 ms = 800/s; 700 / 800 = 87.5%
    assert n["efficiency"] == pytest.approx(0.875) and n["efficiency_from"] == "rate"
    assert n["cores"] == pytest.approx(5000 * 0.0025 / 0.875, abs=0.01)


def test_the_target_rate_comes_from_the_training_step_with_free_data():
    r = {"config": config(2), "free_data_step_s": 0.04}
    assert target_rate_of(r) == (pytest.approx(800.0), "train_step with free data")
    assert target_rate_of(r, 123.0) == (123.0, "--target-rate")
    r.update(bench_record())
    assert cores_needed_section(r)["target_rate"] == pytest.approx(800.0)


def test_nothing_is_stated_without_a_measured_cpu_cost_or_a_pick():
    r = bench_record()
    r["cpu_cost"] = {"error": "ValueError: boom"}
    assert ceiling_sections(r, 5000.0) == {}
    assert (
        ceiling_sections(
            {"command": "bench", "host": {"cores": 2}, "cpu_cost": {"cpu_s_per_sample": 0.001}}
        )
        == {}
    )
    assert ceiling_facts({"command": "bench"}) is None


def test_the_sentences_state_the_ceiling_the_fraction_and_what_follows():
    r = bench_record()
    r.update(ceiling_sections(r, 5000.0))
    facts = ceiling_facts(r)
    assert facts.ceiling_sentence == (
        "The pick (w=2 bs=32, 750 samples/s) reaches 93.8% of this machine's ceiling of 800 "
        "samples/s (2 usable cores ÷ 2.50 ms of CPU per sample): more workers cannot help; only "
        "less CPU per sample (a cheaper decode, augmentation on the accelerator, caching the "
        "deterministic part) or more cores can."
    )
    assert facts.cores_sentence == (
        "At 5,000 samples/s this pipeline needs 13.3 cores (5,000 samples/s × 2.50 ms of CPU per "
        "sample ÷ 93.8% parallel efficiency of w=2 bs=32); this machine has 2 usable: short by "
        "11.3 cores: decode on the accelerator, a cheaper decode, or more CPU per accelerator."
    )
    low = bench_record(rate=400.0, efficiency=0.5)
    low.update(ceiling_sections(low, 100.0))
    facts = ceiling_facts(low)
    assert (
        "reaches 50.0% of" in facts.ceiling_sentence
        and "50.0% of it is lost to the loader's own overheads" in facts.ceiling_sentence
    )
    assert facts.cores_sentence.endswith(
        "the 2 usable cores are enough: the loader's settings decide whether it gets there."
    )


@pytest.mark.parametrize(
    ("busy", "others", "says"),
    [
        (
            1.9,
            0.1,
            "kept 1.90 of the 2 usable cores busy, so 50.0% of it is the CPU the hand-off "
            "between processes costs",
        ),
        (1.0, 0.1, "kept only 1.00 of the 2 usable cores busy: 50.0% of it is lost to waits"),
        (
            1.0,
            1.2,
            "other processes kept 1.20 of the 2 usable cores busy while the CPU cost was "
            "measured: 50.0% of it may be theirs",
        ),
        (None, None, "50.0% of it is lost to the loader's own overheads"),
    ],
)
def test_below_the_ceiling_the_report_says_where_the_rest_went(busy, others, says):
    r = bench_record(rate=400.0, efficiency=0.5)
    if busy is not None:
        r["results"][1]["resources"] = {
            "main_cpu_percent": 10.0,
            "workers_cpu_percent": busy * 100 - 10.0,
        }
    r["cpu_cost"]["others_busy_cores"] = others
    r.update(ceiling_sections(r, 1000.0))
    assert r["ceiling"]["pick_cpu_cores"] == busy
    assert says in ceiling_facts(r).ceiling_sentence
    shared = (
        "other processes kept 1.20 of the 2 usable cores busy meanwhile: the efficiency may "
        "read low"
    )
    assert (shared in ceiling_facts(r).cores_sentence) == (others == 1.2)


def test_replay_times_the_step_after_warm_up_with_a_fake_clock():
    now = [0.0]
    calls = []

    def step(batch):
        calls.append(batch)
        now[0] += 1.0 if len(calls) <= 2 else 0.25  # the first two steps pay warm-up

    out = replay_free_data(step, ["a", "b", "c"], clock=lambda: now[0])
    assert (
        out["free_data_step_s"] == 0.25 and out["free_data_steps"] == 5
    )  # 5 × 0.25 s ≥ the 1 s window
    assert out["free_data_batches"] == 3 and calls[:4] == ["a", "b", "c", "a"]
    fixed = replay_free_data(step, ["a"], clock=lambda: now[0], fixed_steps=3)
    assert fixed["free_data_steps"] == 3
    assert replay_free_data(step, []) is None


def test_a_persistent_pick_reads_the_sweeps_row_of_the_same_steady_state():
    r = bench_record()
    r["results"][1]["resources"] = {"main_cpu_percent": 10.0, "workers_cpu_percent": 180.0}
    persistent = dict(config(2), persistent_workers=True)
    r.update(
        {
            "baseline": {"config": config(0), "samples_per_s": 400.0},
            "best": {
                "config": persistent,
                "samples_per_s": 760.0,
                "speedup": 1.9,
                "head_to_head": [
                    {"config": config(2), "samples_per_s": 750.0, "role": "sweep-best"}
                ],
            },
        }
    )
    c = ceiling_section(r)
    assert c["pick_samples_per_s"] == 760.0 and c["pick_cpu_cores"] == 1.9
    assert cores_needed_section(r, 1000.0)["sweep_efficiency"] == 0.9375
