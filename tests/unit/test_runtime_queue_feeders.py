"""NOTE [queue feeders at exit]: a queue whose pipe nobody reads must not hold the exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A queue with more in its feeder than a pipe holds, and no reader: the feeder blocks in send.
SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from stallscope.runtime.processes import release_queue_feeders

    queue = multiprocessing.get_context("fork").Queue()
    queue.put(b"x" * 4_000_000)
    deadline = time.monotonic() + 10
    while not (queue._thread and queue._thread.is_alive()) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(release_queue_feeders(), queue._joincancelled)
    """
)


def test_a_feeder_blocked_on_a_full_pipe_is_released_and_the_interpreter_exits():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "True"]
