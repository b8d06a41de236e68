"""The real CLI in a subprocess, as a user runs it (``python -m stallscope …``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_stallscope(
    *args: str, cwd: Path | None = None, timeout: float = 240, columns: int | None = None
) -> subprocess.CompletedProcess:
    """``stallscope ARGS`` run from ``cwd``; its exit code, stdout and stderr. ``columns`` fixes the
    console's width where a test reads wrapped lines."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
