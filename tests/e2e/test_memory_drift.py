"""Memory drift under ``ss.watch`` and ``stallscope profile`` with real memory.

A leaking dataset grows, a clean one does not.

The leaking dataset keeps 512 KB of every sample in a module-level list of the
process that fetches it (each fork worker, or the main process with
num_workers=0): 400 samples per worker is 200 MB, well above the memory-growth
rule's 32 MB minimum. The clean one is the same dataset without the list.

The drift is judged on the memory a process made (its anonymous memory, and a
worker's private dirty pages), not on its RSS: this host's page reclaim takes
file-backed pages (a torch process maps about 80 MB) out of the RSS while it
runs, and a memory-mapped dataset adds its file's pages as it reads them. A
third dataset does only the latter: its workers' RSS grows and nothing leaks.
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
STEPS = 400
BATCH = 2
LEAK_BYTES = 512 * 1024
# MB (MiB) per 1,000 samples a process fetched, were every kept byte counted
LEAK_MB_PER_1000 = LEAK_BYTES / (1024 * 1024) * 1000


def leak_rate_is_right(mb_per_1000: float) -> bool:
    """A measured leak rate within the band of the leak (allocator overhead above, reclaimed file
    pages below)."""
    return 0.6 * LEAK_MB_PER_1000 < mb_per_1000 < 1.6 * LEAK_MB_PER_1000


def watched_run(leak: bool, num_workers: int, tmp_path: Path, dataset=None) -> dict:
    if dataset is None:
        dataset = leaking.KeepingDataset(cost_s=0.0005, leak=leak, leak_bytes=LEAK_BYTES)
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
        # The loop's break already shut the workers down (the watch's generator, and the loader
        # iterator it held, were dropped with it); a reading taken after that in the last window
        # keeps the window's full reading (ResourceWindows.add).
        w.close()
        shutdown_iterator(w.current_iterator)
        leaking.KEPT.clear()  # num_workers=0 kept it in this process
    return w.to_dict()


def test_a_leaking_dataset_in_workers_shows_a_growing_slope(tmp_path):
    profile = watched_run(True, 2, tmp_path)
    drift = profile["memory_drift"]
    assert drift["verdict"] == "growing", drift
    # Each worker's leak is seen: the bytes it keeps are anonymous and private dirty pages.
    growing = set(drift["growing"])
    assert all({f"worker {i} anonymous", f"worker {i} private dirty"} & growing for i in (0, 1)), (
        drift,
        [w["workers"] for w in profile["windows"]],
    )
    assert drift["main"]["verdict"] == "flat"  # the leak is in the workers only
    for worker in drift["workers"]:
        # Every measure judged growing grows at a positive rate per hour, with no plateau.
        judged = [
            worker[kind]
            for kind, name in (("anon", "anonymous"), ("dirty", "private dirty"))
            if f"worker {worker['worker']} {name}" in growing
        ]
        assert all(ch["mb_per_hour"] > 0 and ch["plateaued_after"] is None for ch in judged)
        # The faster of the two is the closer to the leak: 512 KB per sample the worker fetched.
        fastest = max(ch["mb_per_1000"] for ch in judged)
        assert leak_rate_is_right(fastest), worker
    windows = profile["windows"]
    # Every window read both workers, but the last may hold only a reading taken as the loop's end
    # shut them down (a window keeps its full reading where it has one: ResourceWindows.add).
    assert len(windows) >= 5 and all(
        len(w["workers"]) == 2 for w in windows[:-1] if w["main_rss_mb"] is not None
    ), [(w["start_step"], w["end_step"], len(w["workers"]), w["main_rss_mb"]) for w in windows]
    assert read_windows(tmp_path / "windows.jsonl")[-1]["end_step"] == windows[-1]["end_step"]
    console = ss.stall_summary(profile)
    # The console leads with the fastest-growing channel (either measure), a worker's.
    worst = drift["worst"]["process"]
    assert worst in growing and worst.startswith("worker "), drift["worst"]
    assert f"memory drift: growing: {worst} " in console, console


def test_a_clean_dataset_in_workers_does_not_grow(tmp_path):
    drift = watched_run(False, 2, tmp_path)["memory_drift"]
    # Flat, not plateaued: a plateau is judged only past 1.5 passes over the data, and the run
    # reads 800 of the dataset's 100,000 samples.
    assert drift["verdict"] == "flat" and drift["pass_samples"] == 100_000, drift
    assert drift["growing"] == [] and drift["plateaued"] == []
    assert all(w["anon"]["grew_mb"] < 32 for w in drift["workers"]), drift


def test_pages_of_a_memory_mapped_file_are_not_growth(tmp_path):
    # 800 rows of 256 KB, read in order by two workers: each maps about 100 MB of the file.
    rows = STEPS * BATCH
    leaking.MappedRows.write(tmp_path / "rows.bin", rows)
    profile = watched_run(False, 2, tmp_path, leaking.MappedRows(tmp_path / "rows.bin", rows))
    drift = profile["memory_drift"]
    readings = [w["workers"] for w in profile["windows"] if len(w["workers"]) == 2]
    # The false cause was there: each worker's RSS rose by more than the rule's minimum.
    for k in (0, 1):
        rss = [r[k]["rss_mb"] for r in readings if r[k]["rss_mb"] is not None]
        assert rss[-1] - rss[0] > 2 * drift["minimum_mb"], (k, rss)
    assert drift["verdict"] == "flat" and drift["growing"] == [], drift
    assert all(w["anon"]["grew_mb"] < drift["minimum_mb"] for w in drift["workers"]), drift


@pytest.mark.parametrize("leak", [True, False])
def test_in_process_loading_judges_the_main_process(leak, tmp_path):
    drift = watched_run(leak, 0, tmp_path)["memory_drift"]
    assert drift["workers"] == []
    assert drift["main"]["verdict"] == ("growing" if leak else "flat"), drift["main"]
    if leak:  # 512 KB per sample, in samples of the whole run
        assert leak_rate_is_right(drift["main"]["mb_per_1000"]), drift["main"]


def test_profile_cli_reports_windows_drift_and_the_plot_over_time(tmp_path, capsys):
    out, html, windows = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "windows.jsonl"
    code = profile_main(
        [
            f"{PIPELINES / 'leaking.py'}:leaking",
            # Enough steps for five readings of the private dirty pages (every 8th reading) under
            # load: workers forked from this test process reuse the heap it freed, so what they keep
            # raises their private dirty pages and not their anonymous memory (240 steps read
            # "flat" in a fresh-clone run, after four).
            "--steps",
            "480",
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
    record = json.loads(out.read_text())
    assert "memory drift: growing" in text, record["memory_drift"]
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
