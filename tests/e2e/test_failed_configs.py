"""A config that fails inside the workers is a failed row, not the end of the sweep (NOTE [failed
configs] in ``throughput/sweep.py``): the real CLI on datasets that fail at 2 workers only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
TARGET = f"{PIPELINES}/fails_in_workers.py"


def run_cli(*args: str, pids: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200", WORKER_PID_DIR=str(pids))
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=PIPELINES.parent.parent,
    )


def _no_worker_alive(pids: Path) -> None:
    started = [int(p.name) for p in pids.iterdir()]
    assert started, "the workers never ran"
    alive = [
        pid
        for pid in started
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert not alive, f"workers left behind: {alive}"


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("raises_at_two_workers", "OSError: per-worker handle refused"),
        ("dies_at_two_workers", "a DataLoader worker died"),
    ],
)
def test_a_config_failing_in_workers_is_a_failed_row_and_the_sweep_goes_on(tmp_path, target, why):
    pids = tmp_path / "pids"
    pids.mkdir()
    out = tmp_path / "bench"
    proc = run_cli(
        "bench",
        f"{TARGET}:{target}",
        "--num-workers",
        "0,1,2",
        "--repeats",
        "2",
        "--window",
        "0.2",
        "--timeout",
        "20",
        "--json",
        str(out.with_suffix(".json")),
        "--md",
        str(out.with_suffix(".md")),
        "--html",
        str(out.with_suffix(".html")),
        pids=pids,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    rows = json.loads(out.with_suffix(".json").read_text())["results"]
    by_workers = {row["config"]["num_workers"]: row for row in rows}
    assert set(by_workers) == {0, 1, 2}
    failed = by_workers[2]
    assert why in failed["error"]
    assert "samples_per_s" not in failed  # no figure for a config that did not run
    for workers in (0, 1):  # measured after the failure too (A B C, then C B A)
        assert by_workers[workers]["error"] is None
        assert by_workers[workers]["samples_per_s"]["median"] > 0
        assert by_workers[workers]["repeats"] == 2
    console = " ".join(proc.stdout.split())
    assert f"{failed['label']} failed: {' '.join(failed['error'].split())}"[:80] in console
    markdown = out.with_suffix(".md").read_text()
    assert f"| `{failed['label']}` | failed |" in markdown
    assert why in markdown
    assert why in out.with_suffix(".html").read_text()
    _no_worker_alive(pids)


def test_the_users_own_config_failing_is_the_commands_error(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = run_cli(
        "bench",
        f"{TARGET}:loader_raising_at_two_workers",
        "--num-workers",
        "0,2",
        "--repeats",
        "1",
        "--window",
        "0.2",
        "--timeout",
        "20",
        pids=pids,
    )
    assert proc.returncode == 2, proc.stdout
    err = " ".join(proc.stderr.split())
    assert "OSError: per-worker handle refused" in err and "w=2 bs=16" in err
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3
    _no_worker_alive(pids)
