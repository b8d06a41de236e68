"""``stallscope stages`` end to end: a real process, real workers, the JSON record."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # Keep the caller's PYTHONPATH (the worktree's src) after the pipelines folder.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(PIPELINES), os.environ.get("PYTHONPATH")) if p
        ),
    }
    return subprocess.run(
        [sys.executable, "-m", "stallscope", "stages", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_stages_json_record(tmp_path):
    out = tmp_path / "stages.json"
    target = f"{PIPELINES / 'stages_injected.py'}:injected"
    done = _run(
        target,
        "--json",
        str(out),
        "--num-workers",
        "2",
        "--start-method",
        "fork",
        "--samples",
        "32",
        "--hotspots",
        "3",
        "--no-differential",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["schema"] == 1 and record["command"] == "stages" and record["target"] == target
    names = [s["name"] for s in record["stages"]]
    assert names[:7] == [
        "read",
        "decode",
        "RandomShiftA",
        "ScaleB",
        "other (__getitem__)",
        "time.sleep()",  # the unmarked sleep __getitem__ calls, broken out of other
        "collate",
    ]
    for item in record["stages"]:
        assert set(item) >= {"name", "ms_per_sample", "share", "kind"}
    assert math.isclose(sum(s["share"] for s in record["stages"]), 1.0, rel_tol=1e-6)
    assert record["augmentation_overhead"]["transforms"] == ["RandomShiftA"]
    assert record["augmentation_overhead"]["percent"] > 0
    assert len(record["hotspots"]) == 3
    assert set(record["hotspots"][0]) >= {
        "function",
        "file",
        "line",
        "calls",
        "total_ms",
        "cumulative_ms",
    }
    assert record["stage_run"]["num_workers"] == 2 and record["stage_run"]["start_method"] == "fork"
    # the console summary was printed too
    assert "Stage breakdown" in done.stdout and "RandomShiftA (random)" in done.stdout
    assert "Augmentation (RandomShiftA; detected as random)" in done.stdout


def test_unknown_augmentation_name_is_a_usage_error(tmp_path):
    target = f"{PIPELINES / 'stages_injected.py'}:injected"
    done = _run(target, "--augmentations", "Nope", "--num-workers", "0", "--quiet", cwd=tmp_path)
    assert done.returncode == 2
    assert "no transform named 'Nope'" in done.stderr and "RandomShiftA" in done.stderr
    assert "Traceback" not in done.stderr
