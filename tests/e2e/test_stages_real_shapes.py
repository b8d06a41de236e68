"""``stallscope stages`` on the real-shape loaders, with no marker in them: the time is
explained by named rows (OpenCV's read and decode, the mosaic and affine helpers, the
WAV read, the mel spectrogram), and ``other (__getitem__)`` keeps at most 30% of it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
OTHER = "other (__getitem__)"
MAX_OTHER_SHARE = 0.30


def _stages(target: str, out: Path, *extra: str) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PIPELINES), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "stages",
            f"{PIPELINES / target}",
            "--json",
            str(out),
            "--samples",
            "96",
            "--hotspots",
            "0",
            "--start-method",
            "fork",
            # the shares are read against a CPU-only table: a GPU adds pin and host→device rows
            "--device",
            "cpu",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("target", "named"),
    [
        # cv2.imread: the file read, then the decode; the loader's own helpers by name
        ("real_detection.py:make_loader", {"read", "decode", "_mosaic()", "_affine()"}),
        # wave.open/readframes read the clip; mel() computes the STFT and the mel projection
        ("real_audio.py:make_loader", {"read", "mel()"}),
    ],
    ids=["detection", "audio"],
)
def test_other_holds_at_most_30_percent_without_markers(target, named, tmp_path):
    record = _stages(target, tmp_path / "stages.json")
    rows = {s["name"]: s for s in record["stages"]}
    assert named <= set(rows), sorted(rows)
    assert all(rows[name]["ms_per_sample"] > 0 for name in named)
    assert rows[OTHER]["share"] <= MAX_OTHER_SHARE, [
        (s["name"], round(s["share"], 3)) for s in record["stages"]
    ]
    calls = [s for s in record["stages"] if s["kind"] == "call"]
    assert calls and all(s["parent"] == OTHER and s["share"] >= 0.05 for s in calls)
    assert math.fsum(s["share"] for s in record["stages"]) == pytest.approx(1.0)
    assert not any("read and decode were not seen" in note for note in record["stage_notes"])


def test_no_callees_keeps_other_whole(tmp_path):
    record = _stages(
        "real_audio.py:make_loader", tmp_path / "stages.json", "--no-callees", "--samples", "24"
    )
    assert [s for s in record["stages"] if s["kind"] == "call"] == []
    assert {"read", OTHER} <= {s["name"] for s in record["stages"]}
