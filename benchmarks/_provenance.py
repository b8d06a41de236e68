"""Where and when a benchmark ran: every committed result JSON carries this block.

A figure quoted in the README or docs/ must be traceable to the commit that made it, the machine
it ran on and how busy that machine was (the 1-minute load average at the start and at the end:
on a 2-core machine a load of 2 already means another job took the cores).

    prov = Provenance.start()
    ... measure ...
    payload = {"provenance": prov.finish(), ...}
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_EXCLUDED = ":(exclude)benchmarks/results"


def git_commit() -> str | None:
    """The commit the working tree is at, with ``+dirty`` when it has uncommitted changes outside
    ``benchmarks/results/`` (the results are outputs: ``regenerate.py`` writes them one after the
    other, and an earlier one's new JSON does not change what a later one measures)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", RESULTS_EXCLUDED],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


@dataclass
class Provenance:
    commit: str | None
    started_at: str
    load_at_start: float
    argv: list[str] = field(default_factory=list)
    _t0: float = 0.0

    @classmethod
    def start(cls) -> Provenance:
        return cls(
            commit=git_commit(),
            started_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            load_at_start=load_average(),
            argv=[Path(sys.argv[0]).as_posix(), *sys.argv[1:]],
            _t0=time.perf_counter(),
        )

    def finish(self) -> dict[str, Any]:
        """The block to write: commit, host, load at start and end, wall time."""
        from stallscope.runtime.host import host_info

        return {
            "commit": self.commit,
            "command": " ".join(["python", *self.argv]),
            "host": host_info().to_dict(),
            "started_at": self.started_at,
            "load_average": {"start": self.load_at_start, "end": load_average()},
            "wall_s": round(time.perf_counter() - self._t0, 1),
        }
