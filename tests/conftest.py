"""Shared fixtures: every test must leave no child process behind."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from stallscope.runtime.processes import is_interpreter_helper

PIPELINES = Path(__file__).parent / "pipelines"
sys.path.insert(0, str(PIPELINES))

# The suite starts several hundred Python processes (the CLI, spawned workers, training jobs),
# and each compiles the stallscope modules it imports again where the environment forbids writing
# bytecode (PYTHONDONTWRITEBYTECODE, set on some CI machines): about 0.8 s of CPU a process on a
# 2-core machine, 11% of an end-to-end file's time. Python's default, cached bytecode, holds here.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _is_worker(proc: psutil.Process) -> bool:
    # The interpreter's own helpers (multiprocessing's resource tracker and forkserver, started
    # by the first spawn or forkserver use; Open MPI's daemon, started by an mpi4py import) exit
    # with it: they are not workers a test left behind.
    try:
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return not is_interpreter_helper(proc)


def _children() -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process().children(recursive=True) if _is_worker(p)]
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Fail a test that leaves a child process alive (after a short grace period)."""
    before = {p.pid for p in _children()}
    yield
    deadline = time.monotonic() + 5.0
    leftover = []
    while time.monotonic() < deadline:
        leftover = [p for p in _children() if p.pid not in before]
        if not leftover:
            return
        time.sleep(0.1)
    names = []
    for proc in leftover:
        try:
            names.append(f"{proc.pid} {' '.join(proc.cmdline()[:4])}")
            proc.kill()
        except psutil.Error:
            pass
    if names:
        pytest.fail("test left child processes alive: " + "; ".join(names))


@pytest.fixture
def pipelines_dir() -> Path:
    return PIPELINES
