"""Under torchrun (2 ranks, CPU, gloo): rank 1's data is made slower and the report names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stallscope.analysis import recommendations

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(
        p for p in (str(PIPELINES), os.environ.get("PYTHONPATH", "")) if p
    )  # the caller's stallscope
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    try:
        return subprocess.run(
            TORCHRUN + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - a hang is the failure
        pytest.fail(f"torchrun did not finish: {exc}")


def test_stallscope_profile_under_torchrun_names_the_slow_rank(tmp_path):
    out = tmp_path / "profile.json"
    proc = _run(
        [
            "-m",
            "stallscope",
            "profile",
            f"{PIPELINES / 'profile_synthetic.py'}:slow_rank_one",
            "--device",  # the ranks are the subject, not the device: the same on a GPU machine
            "cpu",
            "--steps",
            "12",
            "--warmup",
            "1",
            "--window",
            "0.1",
            "--json",
            str(out),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["command"] == "profile" and record["world_size"] == 2
    assert [r["rank"] for r in record["ranks"]] == [0, 1]
    assert record["distributed"]["slowest_rank"] == 1
    fast, slow = record["ranks"]
    assert slow["data_wait_ms_per_step"] > 3 * fast["data_wait_ms_per_step"]
    assert recommendations(record)[0].id == "profile-straggler-rank"
    assert "slowest rank 1" in proc.stdout  # rank 0 printed the job summary, once
    assert proc.stdout.count("Per step (steady state)") == 1
    # per time window (aligned by index from each rank's first batch), the rank that waited longest
    windows = record["distributed"]["windows"]
    assert windows and all(w["slowest_rank"] in (0, 1) for w in windows)
    assert sum(w["slowest_rank"] == 1 for w in windows) > len(windows) / 2, windows
    assert all(r["windows"] and "memory_drift" in r for r in record["ranks"])
    assert "slowest rank per window: rank 1" in " ".join(proc.stdout.split())


def test_watch_gather_in_a_users_torchrun_script(tmp_path):
    out = tmp_path / "watch.json"
    proc = _run([str(PIPELINES / "profile_ddp_watch.py"), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["distributed"]["slowest_rank"] == 1 and result["distributed"]["world_size"] == 2
    assert result["ranks"][1]["data_wait_ms_per_step"] > result["ranks"][0]["data_wait_ms_per_step"]
    assert (
        result["ranks"][0]["steps"] == result["ranks"][1]["steps"] == 7
    )  # 8 batches per rank, the first apart
    assert "slowest rank 1" in proc.stdout
