"""The sweep's fastest per epoch where its epochs restart and start-up decides (sweep_epochs.py):
every surface reads that one config and its rate per epoch. Hand-made records, no clock."""

from __future__ import annotations

import pytest
from test_analysis_report import bench_record, cfg, result

from stallscope import analysis as an
from stallscope.analysis.run_verdict import decide
from stallscope.analysis.sweep_epochs import best_result, sweep_epochs
from stallscope.render.console_table import plain
from stallscope.stats import per_epoch_rate


def grain_like() -> dict:
    """grain on 2 cores: 8 workers drain buffers filled during a 15 s start (3,000 samples/s in
    the window), one process delivers 800 samples/s; the windows saw 2,048-sample epochs."""

    def row(workers: int, rate: float, startup: float, restart: float | None) -> dict:
        return result(
            cfg(workers, bs=32), rate, startup_s=startup, epoch_samples=2048, restart_s=restart
        )

    return bench_record(
        results=[row(0, 800.0, 0.15, None), row(8, 3000.0, 15.0, 20.0)],
        scaling={"cores": 2, "best_index": 1, "plateau_workers": 8},
    )


def test_the_rate_per_epoch_decides_the_sweeps_fastest():
    record = grain_like()
    epochs = sweep_epochs(record)
    assert epochs is not None and epochs.samples == 2048
    assert best_result(record).config["num_workers"] == 0
    # w=0 pays its time to the first batch less that batch's steady time; w=8 its restart.
    w0 = per_epoch_rate(2048, 0.15 - 32 / 800.0, 800.0)
    w8 = per_epoch_rate(2048, 20.0, 3000.0)
    assert epochs.rate_of(cfg(0, bs=32)) == pytest.approx(w0)
    assert epochs.rate_of(cfg(8, bs=32)) == pytest.approx(w8)
    assert w8 < 100 < w0


def test_the_verdict_names_the_per_epoch_fastest_with_its_rate_per_epoch_and_says_why():
    v = decide(grain_like())
    assert v.action != "switch" and v.config["num_workers"] == 0
    assert v.samples_per_s == pytest.approx(per_epoch_rate(2048, 0.15 - 0.04, 800.0))
    assert v.measurement.startswith("per epoch, start-ups included")
    assert v.decided_by is not None and "each restarts 8 workers of w=8 bs=32" in v.decided_by
    assert "(20.00 s, " in v.decided_by and "in steady state" in v.decided_by
    best = an.best_configuration(grain_like())
    assert best.config["num_workers"] == 0 and best.samples_per_s == pytest.approx(v.samples_per_s)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_steady_fastest_is_not_called_fastest_anywhere(fmt):
    from stallscope.render import renderer_for

    facts = an.report_facts(grain_like())
    assert facts.bench is not None and facts.bench.best is not None
    assert facts.bench.best.config["num_workers"] == 0 and facts.bench.best_per_epoch
    text = plain(str(renderer_for(fmt).render(grain_like())))
    assert "Fastest in the sweep per epoch, start-ups included" in text
    assert "w=8 bs=32 pf=2</code> at" not in text and "`w=8 bs=32 pf=2` at" not in text
    assert "Throughput was still rising" not in text  # a steady-state plateau did not decide


def test_short_start_ups_leave_the_steady_state_to_decide():
    record = grain_like()
    record["results"][1]["restart_s"] = 0.01  # 0.01 s of a 0.7 s epoch: under 5%
    assert sweep_epochs(record) is None
    assert best_result(record).config["num_workers"] == 8


def test_without_a_whole_epoch_or_an_epoch_start_nothing_changes():
    record = grain_like()
    for row in record["results"]:
        row["epoch_samples"] = None
    assert sweep_epochs(record) is None
    record = grain_like()
    record["results"][1]["restart_s"] = None  # a DataLoader whose sampler stallscope cycles
    assert sweep_epochs(record) is None
    assert decide(record).config["num_workers"] == 8


def test_a_real_grain_doctor_record_keeps_yours_per_epoch_and_names_labels_as_they_ran():
    """``doctor`` on grain 0.2.18's DataLoader through ``make_loader(worker_count=0)`` (2 cores):
    its 8 workers drained buffers filled in a long start-up. The record's verdict keeps the user's
    loader on the rate per epoch, the sweep's fastest is the same config, and the tuner's
    runner-up is said with the knobs the factory takes (no ``pf=``: grain has no such knob)."""
    import json
    from pathlib import Path

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    record = json.loads((fixtures / "grain_doctor_record.json").read_text())
    v = decide(record)
    assert v.action == "keep-yours" and v.config["num_workers"] == 0
    assert v.measurement.startswith("per epoch, start-ups included")
    assert best_result(record).config["num_workers"] == 0
    tuning = an.tuning_facts(record)
    assert record["best"]["runner_up"] == "w=8 bs=32 pf=2"  # as the tuner stored it
    assert tuning is not None and tuning.runner_up == "w=8 bs=32"


def test_doctor_seeds_the_race_with_the_config_the_verdict_calls_fastest_in_the_sweep():
    """doctor races the sweep's fastest against the tuner's finalists under the role "fastest in
    the sweep": that must be the per-epoch fastest the verdict names, not the steady state's (a
    PyG loader's run named w=4 in the verdict and raced w=8 under that role)."""
    from types import SimpleNamespace

    from stallscope.commands.doctor import sweep_best

    record = grain_like()
    seed = sweep_best(SimpleNamespace(to_dict=lambda: record))
    assert seed is not None and seed.num_workers == 0
    assert seed.num_workers == best_result(record).config["num_workers"]
    record["results"][1]["restart_s"] = 0.01  # start-ups no longer decide: the steady state does
    assert sweep_best(SimpleNamespace(to_dict=lambda: record)).num_workers == 8
