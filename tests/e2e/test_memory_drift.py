"""Memory drift under ``ss.watch`` and ``stallscope profile`` with real memory.

A leaking dataset grows, a clean one does not.

The leaking dataset keeps 256 KB of every sample in a module-level list of the
process that fetches it (each fork worker, or the main process with
num_workers=0): 200 samples per process is 50 MB, above the memory-growth
rule's 32 MB minimum. The clean one is the same dataset without the list.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import leaking
import pytest
from torch.utils.data import DataLoader

import stallscope as ss
from stallscope.commands.profile import main as profile_main
from stallscope.commands.report import main as report_main
from stallscope.runtime.processes import shutdown_iterator
from stallscope.schema import record_schema
from stallscope.training.windows import read_windows

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
# 100 MB kept per worker: well above the rule's 32 MB floor even when a loaded machine delays the
# last reading
STEPS = 400
BATCH = 2


def watched_run(leak: bool, num_workers: int, tmp_path: Path) -> dict:
    dataset = leaking.KeepingDataset(cost_s=0.0005, leak=leak)
    context = "fork" if num_workers else None
    loader = DataLoader(
        dataset, batch_size=BATCH, num_workers=num_workers, multiprocessing_context=context
    )
    w = ss.watch(loader, window_s=0.15, windows_jsonl=tmp_path / "windows.jsonl", gpu=False)
    try:
        for step, _batch in enumerate(w):
            time.sleep(0.005)  # the training step
            if step + 1 >= STEPS:
                break
    finally:
        shutdown_iterator(w.current_iterator)
        w.close()
        leaking.KEPT.clear()  # num_workers=0 kept it in this process
    return w.to_dict()


def test_a_leaking_dataset_in_workers_shows_a_growing_slope(tmp_path):
    profile = watched_run(True, 2, tmp_path)
    drift = profile["memory_drift"]
    assert drift["verdict"] == "growing", drift
    # Each worker's leak is seen: in RSS, or in USS where a shared page settling hides it in RSS.
    growing = set(drift["growing"])
    assert all({f"worker {i} RSS", f"worker {i} USS"} & growing for i in (0, 1)), (
        drift,
        [w["workers"] for w in profile["windows"]],
    )
    assert drift["main"]["verdict"] == "flat"  # the leak is in the workers only
    for worker in drift["workers"]:
        # The rate is read on the measure the leak was judged growing in: this host's page
        # reclaim can take a worker's shared pages out of its RSS while its private memory grows.
        kind = "rss" if f"worker {worker['worker']} RSS" in growing else "uss"
        channel = worker[kind]
        # 256 KB per sample the worker fetched: 250 MB per 1,000 (allocator overhead on top)
        assert 150 < channel["mb_per_1000"] < 400, (kind, channel)
        assert channel["mb_per_hour"] > 0 and channel["plateaued_after"] is None, (kind, channel)
    windows = profile["windows"]
    assert len(windows) >= 5 and all(
        len(w["workers"]) == 2 for w in windows if w["main_rss_mb"] is not None
    )
    assert read_windows(tmp_path / "windows.jsonl")[-1]["end_step"] == windows[-1]["end_step"]
    console = ss.stall_summary(profile)
    # The console leads with the fastest-growing channel (RSS or USS, whichever it was), a worker's.
    worst = drift["worst"]["process"]
    assert worst in growing and worst.startswith("worker "), drift["worst"]
    assert f"memory drift: growing: {worst} " in console, console


def test_a_clean_dataset_in_workers_does_not_grow(tmp_path):
    drift = watched_run(False, 2, tmp_path)["memory_drift"]
    assert drift["verdict"] in ("flat", "plateaued"), drift
    assert drift["growing"] == []
    assert all(w["rss"]["grew_mb"] < 32 for w in drift["workers"]), drift


@pytest.mark.parametrize("leak", [True, False])
def test_in_process_loading_judges_the_main_process(leak, tmp_path):
    drift = watched_run(leak, 0, tmp_path)["memory_drift"]
    assert drift["workers"] == []
    assert drift["main"]["verdict"] == ("growing" if leak else "flat"), drift["main"]
    if leak:
        assert drift["main"]["mb_per_1000"] > 150  # 256 KB per sample, in samples of the whole run


def test_profile_cli_reports_windows_drift_and_the_plot_over_time(tmp_path, capsys):
    out, html, windows = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "windows.jsonl"
    code = profile_main(
        [
            f"{PIPELINES / 'leaking.py'}:leaking",
            "--steps",
            "240",
            "--warmup",
            "4",
            "--num-workers",
            "2",
            "--window",
            "0.15",
            "--windows-jsonl",
            str(windows),
            "--json",
            str(out),
            "--html",
            str(html),
        ]
    )
    assert code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "memory drift: growing" in text
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    assert record["memory_drift"]["verdict"] == "growing" and record["window_s"] == 0.15
    # samples per step known (the config's batch size): rates per samples, not steps
    assert (
        record["memory_drift"]["per"] == "samples"
        and record["windows"][0]["end_samples"] is not None
    )
    assert [w["index"] for w in read_windows(windows)] == [w["index"] for w in record["windows"]]
    page = html.read_text()
    assert (
        '<img src="data:image/png;base64,' in page
        and 'alt="Stall fraction and memory per time window"' in page
    )
    assert "Memory drift: growing" in page
    # the windows file alone is enough to read the run back and render it
    md = tmp_path / "windows.md"
    assert report_main([str(windows), "--md", str(md)]) == 0
    text = md.read_text()
    assert "Memory drift: growing" in text and "over_time.png" in text
    assert f"over {record['steps']:,} steps" in text  # the steady steps, summed over the windows
