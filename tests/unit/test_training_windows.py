"""Time windows of long runs: exact per-window figures with a fake clock, the memory drift rule,
JSON lines, schema."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema
import pytest

from stallscope.analysis.drift import memory_drift, slowest_rank_per_window
from stallscope.api import Watch
from stallscope.schema import record_schema
from stallscope.training.windows import ResourceWindows, read_windows, step_windows

# Binary-exact step costs (s): window boundaries fall exactly between steps.
FAST_DATA, SLOW_COMPUTE = 0.0625, 0.1875  # stall 25%
SLOW_DATA, FAST_COMPUTE = 0.1875, 0.0625  # stall 75%
HOST = {"cores": 2, "memory_bytes": 2**33, "torch": "2.13.0", "cuda": None, "gpu": None}


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class TimedSource:
    """An iterable whose i-th next() costs ``data[i]`` of fake time."""

    def __init__(self, clock: FakeClock, data: list[float]) -> None:
        self.clock, self.data = clock, data

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        for i, cost in enumerate(self.data):
            self.clock.t += cost
            yield i


def fake_run(data: list[float], compute: list[float], *, on_step=None, **options) -> Watch:
    clock = FakeClock()
    w = Watch(TimedSource(clock, data), clock=clock, sample_resources=False, gpu=False, **options)
    for i in w:
        clock.t += compute[i]
        if on_step is not None:
            on_step(i)
    w.close()
    return w


def two_phases(n_fast: int, n_slow: int) -> tuple[list[float], list[float]]:
    return [FAST_DATA] * n_fast + [SLOW_DATA] * n_slow, [SLOW_COMPUTE] * n_fast + [
        FAST_COMPUTE
    ] * n_slow


# -- windows of steps --------------------------------------------------------------------------


def test_windows_hold_exact_stall_and_step_time_per_window():
    data, compute = two_phases(
        6, 7
    )  # 13 steps of 0.25 s; windows of 0.5 s hold two each, the last one
    d = fake_run(data, compute, window_s=0.5).to_dict()
    windows = d["windows"]
    assert d["window_s"] == 0.5
    assert [w["index"] for w in windows] == list(range(7))
    assert [w["total_steps"] for w in windows] == [2, 2, 2, 2, 2, 2, 1]
    assert [w["first_step"] for w in windows] == [0, 2, 4, 6, 8, 10, 12]
    assert [w["end_step"] for w in windows] == [2, 4, 6, 8, 10, 12, 13]
    # step 0 is the epoch's first batch: kept out of the steady figures, as in the profile's own
    assert [w["steps"] for w in windows] == [1, 2, 2, 2, 2, 2, 1]
    assert [w["stall_fraction"] for w in windows] == [0.25, 0.25, 0.25, 0.75, 0.75, 0.75, 0.75]
    assert all(w["step_ms_p50"] == w["step_ms_p95"] == 250.0 for w in windows)
    assert windows[3]["data_wait_s"] == pytest.approx(2 * SLOW_DATA)
    assert windows[3]["data_ms_mean"] == pytest.approx(187.5)
    assert windows[3]["steps_per_s"] == pytest.approx(4.0)
    assert [w["start_s"] for w in windows] == [0.5 * k for k in range(7)]
    assert [w["partial"] for w in windows] == [False] * 6 + [
        True
    ]  # the run ended 0.25 s into the last
    assert windows[0]["end_samples"] is None  # the source has no batch size
    assert (
        windows[0]["main_rss_mb"] is None and windows[0]["workers"] == []
    )  # resources not sampled


def test_windows_skip_a_pause_and_count_warmup_out():
    t_req = [0.0, 0.25, 0.5, 5.0, 5.25]  # a pause (validation) between 0.75 s and 5 s
    data = [0.0625] * 5
    compute = [0.1875] * 5
    windows = step_windows(
        t_req, data, compute, epoch_starts=[0], warmup=2, origin=0.0, window_s=1.0, batch_size=8
    )
    assert [w["index"] for w in windows] == [0, 5]
    assert [w["steps"] for w in windows] == [1, 2]  # steps 0 and 1 are the first batch and warm-up
    assert [w["end_samples"] for w in windows] == [24, 40]
    # only the steps of the range are read: the watch asks for the windows that closed since its
    # last write
    assert [
        w["index"]
        for w in step_windows(
            t_req, data, compute, epoch_starts=[0], warmup=0, origin=0.0, window_s=1.0, start=3
        )
    ] == [5]


def _reading(**changes) -> SimpleNamespace:
    """One resource reading of a main process and two workers, with ``changes``."""
    reading = {
        "main_cpu_percent": 50.0,
        "workers_cpu_percent": 100.0,
        "main_rss_mb": 300.0,
        "workers_rss_mb": 400.0,
        "worker_rss_mb": [200.0, 200.0],
        "worker_uss_each": None,
        "main_anon_mb": 250.0,
        "worker_anon_mb": [120.0, 130.0],
        "worker_dirty_each": None,
    }
    return SimpleNamespace(**{**reading, **changes})


def test_a_reading_taken_as_the_workers_shut_down_keeps_the_windows_full_reading():
    # The loop ended: its loader's workers shut down, and the sampler's last reading of the epoch
    # found one of the two (the full suite's memory-drift run, under load).
    rw = ResourceWindows(10.0)
    rw.origin = 0.0
    both = _reading(worker_uss_each=[150.0, 160.0])
    one = _reading(main_rss_mb=310.0, workers_rss_mb=205.0, worker_rss_mb=[205.0])
    rw.add(1.0, both)
    rw.add(2.0, one)
    window = rw.figures(0)
    assert [w["rss_mb"] for w in window["workers"]] == [200.0, 200.0]
    assert [w["uss_mb"] for w in window["workers"]] == [150.0, 160.0]
    assert window["workers_rss_mb"] == 400.0 and window["main_rss_mb"] == 310.0
    # A window whose only reading came after one worker ended says what it read.
    rw.add(12.0, one)
    assert [w["rss_mb"] for w in rw.figures(1)["workers"]] == [205.0]


def test_resource_readings_fold_into_their_window():
    rw = ResourceWindows(10.0)
    tick = _reading()
    rw.add(5.0, tick)  # before the first batch request: no origin yet, dropped
    rw.origin = 1000.0
    rw.add(1001.0, tick)
    rw.add(
        1002.0,
        SimpleNamespace(
            **{
                **vars(tick),
                "main_cpu_percent": 70.0,
                "main_rss_mb": 310.0,
                "worker_uss_each": [90.0, 110.0],
                "worker_dirty_each": [60.0, 70.0],
            }
        ),
    )
    rw.add(1012.0, SimpleNamespace(**{**vars(tick), "main_rss_mb": 320.0}))
    first = rw.figures(0)
    assert first["main_cpu_percent"] == 60.0  # mean of the readings in the window
    assert first["main_rss_mb"] == 310.0  # memory at the window's end: its latest reading
    assert first["worker_uss_mb"] == 100.0
    assert first["main_anon_mb"] == 250.0
    assert first["workers"] == [
        {"worker": 0, "rss_mb": 200.0, "anon_mb": 120.0, "uss_mb": 90.0, "dirty_mb": 60.0},
        {"worker": 1, "rss_mb": 200.0, "anon_mb": 130.0, "uss_mb": 110.0, "dirty_mb": 70.0},
    ]
    assert rw.figures(1)["main_rss_mb"] == 320.0 and rw.figures(1)["worker_uss_mb"] is None
    assert rw.figures(7)["main_rss_mb"] is None


# -- memory drift: check's growth rule over windows ---------------------------------------------


def memory_windows(
    rss: list[float],
    *,
    worker_rss: list[float] | None = None,
    window_s: float = 60.0,
    samples_per_window: int = 1000,
) -> list[dict]:
    out = []
    for k, main in enumerate(rss):
        workers = (
            [] if worker_rss is None else [{"worker": 0, "rss_mb": worker_rss[k], "uss_mb": None}]
        )
        out.append(
            {
                "index": k,
                "end_s": (k + 1) * window_s,
                "end_step": (k + 1) * 10,
                "end_samples": (k + 1) * samples_per_window,
                "main_rss_mb": main,
                "workers": workers,
            }
        )
    return out


def test_a_steady_leak_is_growing_with_its_slope_per_hour_and_per_thousand_samples():
    flat = [500.0 + (k % 2) for k in range(12)]
    leak = [
        200.0 + 10.0 * k for k in range(12)
    ]  # 10 MB per window of 60 s and 1,000 samples (one worker)
    drift = memory_drift(memory_windows(flat, worker_rss=leak), pass_samples=3000)
    assert drift["verdict"] == "growing" and drift["growing"] == ["worker 0 RSS"]
    worker = drift["workers"][0]["anon"]  # a record without anonymous readings: its RSS
    assert worker["mb_per_hour"] == pytest.approx(600.0)
    assert worker["mb_per_1000"] == pytest.approx(10.0)
    assert worker["grew_mb"] == 110.0 and worker["plateaued_after"] is None
    assert drift["main"]["verdict"] == "flat"
    assert drift["worst"]["process"] == "worker 0 RSS"


def test_drift_is_judged_on_the_memory_a_process_made_not_the_pages_it_maps():
    # A worker reading a memory-mapped file: its RSS and USS rise by 10 MB a window while its
    # anonymous memory and private dirty pages stay put.
    mapped = [200.0 + 10.0 * k for k in range(12)]
    windows = memory_windows([500.0] * 12, worker_rss=mapped)
    for k, w in enumerate(windows):
        w["main_anon_mb"] = 300.0
        w["workers"][0].update(anon_mb=80.0 + (k % 2), uss_mb=mapped[k] - 100, dirty_mb=40.0)
    drift = memory_drift(windows, pass_samples=30_000)
    assert drift["verdict"] == "flat" and drift["growing"] == [], drift
    assert drift["workers"][0]["anon"]["grew_mb"] <= 1.0
    # The same worker writing what it keeps: both measures grow, anonymous memory headlines.
    for k, w in enumerate(windows):
        w["workers"][0].update(anon_mb=80.0 + 10.0 * k, dirty_mb=40.0 + 10.0 * k)
    drift = memory_drift(windows, pass_samples=30_000)
    assert drift["growing"] == ["worker 0 anonymous", "worker 0 private dirty"]
    assert drift["worst"]["process"] == "worker 0 anonymous"
    assert drift["worst"]["mb_per_1000"] == pytest.approx(10.0)


def test_growth_that_levels_off_is_plateaued_and_small_noise_is_flat():
    cache = [
        300.0 + min(k, 4) * 20.0 for k in range(15)
    ]  # +80 MB over the first 4 windows, then flat
    drift = memory_drift(memory_windows(cache), pass_samples=4000)
    assert drift["verdict"] == "plateaued" and drift["main"]["verdict"] == "plateaued"
    assert drift["main"]["plateaued_after"] == 5000  # the end of window 4, 5,000 samples in
    assert drift["main"]["after_plateau_mb_per_1000"] == pytest.approx(0.0)
    # the same growth still inside the first 1.5 passes cannot be told from a leak (check's rule)
    assert memory_drift(memory_windows(cache), pass_samples=20_000)["verdict"] == "growing"
    noise = [300.0 + (3.0 if k % 3 else 0.0) for k in range(15)]
    assert memory_drift(memory_windows(noise))["verdict"] == "flat"
    few = memory_drift(memory_windows([1.0, 2.0, 3.0]))
    assert few["verdict"] is None and "fewer than 5 windows" in few["reason"]


def test_the_slowest_rank_is_named_per_window():
    ranks = [
        {
            "rank": 0,
            "windows": [
                {"index": 0, "data_wait_s": 1.0, "stall_fraction": 0.1},
                {"index": 1, "data_wait_s": 5.0, "stall_fraction": 0.5},
            ],
        },
        {
            "rank": 1,
            "windows": [
                {"index": 0, "data_wait_s": 3.0, "stall_fraction": 0.3},
                {"index": 1, "data_wait_s": 2.0, "stall_fraction": 0.2},
            ],
        },
    ]
    rows = slowest_rank_per_window(ranks)
    assert [(r["index"], r["slowest_rank"], r["max_stall_fraction"]) for r in rows] == [
        (0, 1, 0.3),
        (1, 0, 0.5),
    ]
    assert rows[0]["max_data_wait_s"] == 3.0 and rows[0]["ranks"] == 2


# -- JSON lines and TensorBoard -------------------------------------------------------------------


def test_windows_go_to_json_lines_as_they_close_and_read_back(tmp_path):
    path = tmp_path / "run.windows.jsonl"
    data, compute = two_phases(50, 50)  # 100 steps, two per window of 0.5 s
    seen_mid_run = []

    def on_step(i: int) -> None:
        if i == 70:
            seen_mid_run.append(len(path.read_text().splitlines()))

    w = fake_run(data, compute, window_s=0.5, windows_jsonl=path, on_step=on_step)
    # by step 70 the sink had looked at steps 32 and 64: the windows closed by then were on disk
    assert seen_mid_run == [31]
    back = read_windows(path)
    assert [b.pop("rank") for b in back] == [None] * 50
    assert back == w.to_dict()["windows"]
    # a run killed mid-line leaves a torn last line: skipped; a line of something else is an error
    with path.open("a") as f:
        f.write('{"kind": "window", "ind')
    assert len(read_windows(path)) == 50
    (tmp_path / "other.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    with pytest.raises(ValueError, match="not a stallscope window"):
        read_windows(tmp_path / "other.jsonl")


def test_the_per_step_jsonl_gets_its_windows_next_to_it(tmp_path):
    data, compute = two_phases(4, 4)
    fake_run(data, compute, window_s=0.5, jsonl=tmp_path / "steps.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and "kind" not in rows[0]  # the per-step file stays as it was
    assert [w["index"] for w in read_windows(tmp_path / "steps.windows.jsonl", name="train")] == [
        0,
        1,
        2,
        3,
    ]


def test_tensorboard_gets_scalars_per_window():
    class Writer:
        def __init__(self) -> None:
            self.scalars: list[tuple[str, float, int]] = []

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            self.scalars.append((tag, value, step))

    writer = Writer()
    data, compute = two_phases(4, 4)
    fake_run(data, compute, window_s=0.5, tensorboard=writer)
    stall = [
        (v, s) for tag, v, s in writer.scalars if tag == "stallscope/train/window/stall_fraction"
    ]
    assert stall == [
        (0.25, 2),
        (0.25, 4),
        (0.75, 6),
        (0.75, 8),
    ]  # at the step count of each window's end


# -- the record -----------------------------------------------------------------------------------


def test_the_schema_describes_windows_and_memory_drift():
    data, compute = two_phases(6, 7)
    profile = fake_run(data, compute, window_s=0.5).to_dict()
    profile["memory_drift"] = memory_drift(
        memory_windows([100.0 + 10 * k for k in range(8)], worker_rss=[50.0] * 8)
    )
    record = {
        "schema": 1,
        "tool_version": "0",
        "command": "profile",
        "target": "t",
        "host": HOST,
        **profile,
    }
    schema = record_schema()
    jsonschema.validate(record, schema)
    record["windows"][0]["stall_fraction"] = 1.5
    with pytest.raises(jsonschema.ValidationError, match="1.5"):
        jsonschema.validate(record, schema)
    record["windows"][0]["stall_fraction"] = 0.25
    record["memory_drift"]["verdict"] = "leaking"
    with pytest.raises(jsonschema.ValidationError, match="leaking"):
        jsonschema.validate(record, schema)


def test_window_length_must_be_positive():
    from stallscope.errors import UsageError

    with pytest.raises(UsageError, match="window_s"):
        Watch([1, 2], window_s=0)


def test_the_sampler_hands_every_reading_on_and_keeps_none_without_keep_ticks():
    # A watch's epoch can stay open for days: its sampler keeps no list of readings, the windows get
    # each one.
    from stallscope.runtime.resources import ResourceSampler

    heard = []
    sampler = ResourceSampler(
        0.01,
        uss_every=2,
        worker_pids=list,
        keep_ticks=False,
        on_tick=lambda at, tick: heard.append((at, tick)),
    )
    sampler.begin()
    for _ in range(5):
        sampler.sample()
    summary = sampler.finish()
    assert summary.ticks == [] and sampler.latest() is heard[-1][1]
    assert len(heard) == 6  # five readings and the closing one
    assert all(tick.main_rss_mb > 0 and tick.worker_rss_mb == [] for _, tick in heard)
    assert [at for at, _ in heard] == sorted(at for at, _ in heard)
