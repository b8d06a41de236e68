"""NOTE [fork after use]: a check run by a script that has already iterated its loader in its own
process, as a validation pass or a peek at the first batch would (the hang is that process's, so
the script runs in its own interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import stallscope as ss
    sys.path.insert(0, {pipelines!r})
    import fork_after_use

    next(iter(fork_after_use.{factory}()))  # the pipeline runs here first
    result = ss.check({target!r}, timeout=3.0, budget=60)
    print(json.dumps([f.to_dict() for f in result.findings]))
    """
)


def _check_after_use(factory: str) -> dict[str, dict]:
    code = SCRIPT.format(
        pipelines=str(PIPELINES),
        factory=factory,
        target=f"{PIPELINES / 'fork_after_use.py'}:{factory}",
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return {f["code"]: f for f in json.loads(done.stdout.strip().splitlines()[-1])}


def test_a_stream_that_hangs_only_forked_after_use_still_gets_its_duplicates_found():
    findings = _check_after_use("make_stream_loader")
    hang = findings["hang"]
    assert hang["severity"] == "warning" and hang["evidence"]["cause"] == "fork-after-use"
    assert (
        hang["evidence"]["index"] == "w0#0" and "sharding" not in hang["evidence"]["fork_control"]
    )
    # Compared in a fresh interpreter's workers: every row came from both.
    duplicates = findings["iterable-duplicates"]
    assert duplicates["severity"] == "error" and duplicates["evidence"]["duplicate_fraction"] == 1.0
    assert duplicates["evidence"]["workers"] == 2
