"""Which children a command reaps: workers, never the interpreter's own helpers
(stallscope.runtime.processes)."""

from __future__ import annotations

import shutil
import subprocess
import time

import psutil

from stallscope.runtime.processes import descendants, reap_children


def _child(path: str) -> subprocess.Popen:
    proc = subprocess.Popen([path, "30"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until psutil reads the new image's name
        if psutil.Process(proc.pid).name() == path.rsplit("/", 1)[-1]:
            break
        time.sleep(0.01)
    return proc


def test_open_mpis_daemon_is_the_interpreters_helper_and_a_worker_is_reaped(tmp_path):
    # mpi4py's MPI_Init starts `orted` (Open MPI 5: `prted`) in a process mpirun did not launch;
    # it exits with that process, and killing it aborted the process (Lightning imports mpi4py).
    daemon = tmp_path / "orted"
    shutil.copy(shutil.which("sleep"), daemon)
    helper, worker = _child(str(daemon)), _child(shutil.which("sleep"))
    try:
        alive = {p.pid for p in descendants()}
        assert worker.pid in alive and helper.pid not in alive
        assert reap_children(timeout=2.0) == [worker.pid]
        assert worker.wait(timeout=5) is not None and helper.poll() is None
    finally:
        for proc in (helper, worker):
            proc.kill()
            proc.wait()
