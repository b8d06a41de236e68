"""The real CLI in a subprocess, as a user runs it (``python -m stallscope …``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil


def run_stallscope(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 240,
    columns: int | None = None,
    cores: int | None = None,
) -> subprocess.CompletedProcess:
    """``stallscope ARGS`` run from ``cwd``; its exit code, stdout and stderr. ``columns`` fixes the
    console's width where a test reads wrapped lines; ``cores`` limits the command to that many
    CPUs (its affinity, which stallscope reads as the cores it may use), where what a test checks
    was built on a machine of that size. A run past ``timeout`` fails the test with the Python
    stacks of the command and its children (py-spy), then is killed with them."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    argv = [sys.executable, "-m", "stallscope", *args]
    cpus = sorted(os.sched_getaffinity(0))[:cores] if cores else None
    with subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = _stacks(proc.pid)
            _kill_tree(proc.pid)
            stdout, stderr = proc.communicate()
            raise AssertionError(
                f"{' '.join(argv[1:])} ran past {timeout:g} s; where it was:\n{stacks}\n"
                f"stdout (end): {stdout[-2000:]}\nstderr (end): {stderr[-2000:]}"
            ) from None
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _stacks(pid: int) -> str:
    """py-spy's dump of ``pid`` and every process below it, as far as it can read them."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        pids = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        pids = [pid]
    out = []
    for each in pids:
        try:
            dump = subprocess.run(
                [spy, "dump", "--pid", str(each)], capture_output=True, text=True, timeout=30
            )
            out.append(f"-- pid {each}:\n{dump.stdout or dump.stderr}")
        except (OSError, subprocess.SubprocessError) as exc:
            out.append(f"-- pid {each}: no dump ({exc})")
    return "\n".join(out)


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
