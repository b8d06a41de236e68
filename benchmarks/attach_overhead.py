"""What ``stallscope attach`` costs a running job, and how well it agrees with the job's own clock.

The job is ``tests/pipelines/attach_training.py``, started on its own: a DataLoader with 2 workers
over a dataset whose items cost a known time (``slow_read`` then ``augment``), a train step of
known cost, and a log of every step's data wait measured by the job itself. Three settings:
``input`` (the loader is the bottleneck), ``compute`` (the step is) and ``cpu`` (as compute, with
a step that spins on the CPU, so that the cores py-spy takes show in the step time).

For each setting, ``--repeats`` jobs: each starts the job, waits until it trains, lets it run
``LEAD_S``, then runs four windows of ``--duration`` seconds in the order bare, attached, attached,
bare (attached: the real CLI at 100 Hz; bare: nothing), then ends the job through its stop file
(it finishes normally and logs its checksum). Windows of one job share its process and its
workers, and the A B B A order cancels a steady drift of the machine's speed. Figures:

- **slowdown**: the job's wall time per step (its loop, logging included) in its attached windows
  against its bare ones, per job;
  the median of the jobs and every job (target ≤ 2%);
- **data-wait agreement**: attach's data-wait fraction against the job's own log over the same
  window (target within 0.05);
- **top stage**: the stage table's first row and its share against the known share
  (``read_ms / (read_ms + augment_ms)`` = 0.75; target within 15% of it);
- **results unchanged**: every run's checksum against the one its step count must give;
- **attach's own CPU**: CPU seconds the CLI and its py-spy used per second of window, in cores
  (what it takes from a machine whose cores are all busy).

    python benchmarks/attach_overhead.py                 # 2 jobs per setting, 20 s windows
    python benchmarks/attach_overhead.py --repeats 1 --duration 5   # a quick look
    python benchmarks/attach_overhead.py --json benchmarks/results/attach.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _provenance import ROOT, Provenance

sys.path.insert(0, str(ROOT / "tests" / "pipelines"))
from attach_training import (  # noqa: E402
    SETTINGS,
    expected_checksum,
    logged_wait_fraction,
    read_log,
)

SCRIPT = ROOT / "tests" / "pipelines" / "attach_training.py"
LEAD_S = 2.0  # past the workers' start and the first batches
RATE_HZ = 100
SLOWDOWN_TARGET = 0.02
AGREEMENT_TARGET = 0.05
TOP_SHARE_TOLERANCE = 0.15  # relative
WINDOWS = (False, True, True, False)  # bare, attached, attached, bare: a drift cancels


def attach_window(pid: int, duration: float, out: Path, rate: int) -> dict[str, Any]:
    """Attach for ``duration`` seconds through the real CLI; the window's figures, with the CPU
    seconds the CLI and its py-spy used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "stallscope", "attach", str(pid)]
        + ["--duration", str(duration), "--rate", str(rate), "--quiet", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=duration + 120,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"attach failed: {proc.stderr.strip()}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record = json.loads(out.read_text())
    attach = record["attach"]
    top = record["stages"][0] if record["stages"] else {}
    return {
        "start": record["attach_capture"]["started_at"],
        "attach_wait_fraction": attach["data_wait_fraction"],
        "attach_interval": attach["interval"],
        "attach_samples": attach["samples"],
        "attach_verdict": attach["verdict"],
        "top_stage": top.get("name"),
        "top_stage_share": top.get("share"),
        "attach_wall_s": record["duration_s"],
        "attach_cpu_s": cpu_s,
        "attach_cores": cpu_s / duration,  # CPU the sampling took, in cores, over the window
    }


def run_job(setting: str, duration: float, folder: Path, rate: int = RATE_HZ) -> dict[str, Any]:
    """One job, four windows of ``duration`` s in the order bare, attached, attached, bare."""
    tag = f"{setting}-{time.monotonic_ns()}"
    log, ready, stop = folder / f"{tag}.jsonl", folder / f"{tag}.ready", folder / f"{tag}.stop"
    job = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--setting", setting, "--steps", "1000000"]
        + ["--step-log", str(log), "--ready", str(ready), "--stop-file", str(stop)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    windows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not start: {job.stderr.read().decode()[-400:]}")
            time.sleep(0.05)
        time.sleep(LEAD_S)
        for i, attached in enumerate(WINDOWS):
            if attached:
                out = folder / f"{tag}-{i}.json"
                window = {"attached": True, **attach_window(job.pid, duration, out, rate)}
            else:
                window = {"attached": False, "start": time.time()}
                time.sleep(duration)
            windows.append(window)
        stop.write_text("stop")
        code = job.wait(timeout=120)
        steps, done = read_log(str(log))
        for window in windows:
            start = window["start"]
            inside = [i for i, s in enumerate(steps) if start <= s["t"] < start + duration]
            # the loop's wall time per step: from the window's first step to the step after it
            last = inside[-1]
            ended = steps[last + 1]["t"] if last + 1 < len(steps) else None
            ended = ended or steps[last]["t"] + steps[last]["step_s"]
            wall = ended - steps[inside[0]]["t"]
            window.update(
                window_steps=len(inside),
                mean_step_ms=1000 * wall / len(inside),
                own_wait_fraction=logged_wait_fraction(steps, start, start + duration),
            )
            if window["attached"]:
                window["wait_diff"] = window["attach_wait_fraction"] - window["own_wait_fraction"]
        bare = [w["mean_step_ms"] for w in windows if not w["attached"]]
        attached_ms = [w["mean_step_ms"] for w in windows if w["attached"]]
        return {
            "setting": setting,
            "exit_code": code,
            "steps": len(steps),
            "checksum_ok": bool(done)
            and done["checksum"] == expected_checksum(setting, len(steps)),
            "slowdown": statistics.fmean(attached_ms) / statistics.fmean(bare) - 1,
            "windows": windows,
        }
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        job.stderr.close()


def summarise(setting: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    read_ms, augment_ms, _, _ = SETTINGS[setting]
    known = read_ms / (read_ms + augment_ms)
    attached = [w for job in jobs for w in job["windows"] if w["attached"]]
    slowdowns = [job["slowdown"] for job in jobs]
    diffs = [w["wait_diff"] for w in attached]
    shares = [w["top_stage_share"] for w in attached]
    return {
        "slowdown_median": statistics.median(slowdowns),
        "slowdown_jobs": slowdowns,
        "slowdown_within_target": statistics.median(slowdowns) <= SLOWDOWN_TARGET,
        "attach_cores": [w.get("attach_cores") for w in attached],
        "own_wait_fraction": [w["own_wait_fraction"] for w in attached],
        "attach_wait_fraction": [w["attach_wait_fraction"] for w in attached],
        "wait_diffs": diffs,
        "max_abs_wait_diff": max(abs(d) for d in diffs),
        "wait_within_target": all(abs(d) <= AGREEMENT_TARGET for d in diffs),
        "top_stage": [w["top_stage"] for w in attached],
        "top_stage_share": shares,
        "known_top_share": known,
        "top_within_target": all(
            w["top_stage"] == "slow_read" and abs(s - known) <= TOP_SHARE_TOLERANCE * known
            for w, s in zip(attached, shares)
        ),
        "all_exit_0": all(job["exit_code"] == 0 for job in jobs),
        "results_unchanged": all(job["checksum_ok"] for job in jobs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="jobs per setting (default 2)")
    parser.add_argument("--duration", type=float, default=20.0, help="attach window, s")
    parser.add_argument("--settings", default="input,compute,cpu")
    parser.add_argument("--rate", type=int, default=RATE_HZ, help="attach --rate (default 100)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    provenance = Provenance.start()
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    jobs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="attach-bench-") as tmp:
        for repeat in range(args.repeats):
            for setting in settings:
                job = run_job(setting, args.duration, Path(tmp), args.rate)
                job["repeat"] = repeat
                jobs.append(job)
                print(json.dumps(job), flush=True)
    summary = {s: summarise(s, [j for j in jobs if j["setting"] == s]) for s in settings}
    payload = {
        "benchmark": "attach_overhead",
        "provenance": provenance.finish(),
        "duration_s": args.duration,
        "rate_hz": args.rate,
        "repeats": args.repeats,
        "targets": {
            "slowdown": SLOWDOWN_TARGET,
            "wait_agreement": AGREEMENT_TARGET,
            "top_share_relative": TOP_SHARE_TOLERANCE,
        },
        "settings": {
            s: dict(zip(("read_ms", "augment_ms", "batch_size", "step_ms"), SETTINGS[s]))
            for s in settings
        },
        "summary": summary,
        "jobs": jobs,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
