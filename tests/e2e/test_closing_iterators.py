"""A loader whose iterator joins its pump thread in ``__del__`` (grain's shape,
``tests/pipelines/closing_iterator.py``) must not hang a command: every iterator stallscope opens
is closed before its processes are reaped (NOTE [closing iterators] in pipeline/kinds.py). Before
that, ``bench`` on it blocked at a garbage-collection point until it was killed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PIPELINES = Path(__file__).parent.parent / "pipelines"


def test_bench_on_a_loader_that_closes_in_del_ends_with_a_report(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "bench",
            "closing_iterator.py:make_loader",
            "--num-workers",
            "1,2",
            "--json",
            str(out),
        ],
        cwd=PIPELINES,
        capture_output=True,
        text=True,
        timeout=240,  # the hang it guards against never ended on its own
    )
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(out.read_text())
    rates = [r["samples_per_s"]["median"] for r in record["results"]]
    assert len(rates) == 2 and all(rate > 0 for rate in rates), record["results"]
    assert "Exception ignored" not in run.stderr, run.stderr[-2000:]
