"""Probe: does a sample that hung in a forked worker return in a worker forked from a fresh
interpreter?

NOTE [fork after use]
``fork`` copies a process's memory but only the thread that called it. A library that runs its
work on threads of its own, started at its first use (Daft's event loop and its Rust pools, a
tokio runtime, a native thread pool), leaves a forked child its state without its threads: the
child's first request waits for an answer nobody will give. Whether the workers hang then depends
on what the main process did before it forked them, not on the sample: a script that builds its
loader and iterates it with workers runs, and the same script after a single-process validation
pass, or a peek at ``next(iter(loader))``, hangs. stallscope's own steps iterate the pipeline in
its process before they fork workers (to learn its batches, and its ``num_workers=0`` trials), so
the check's workers hung on a Daft DataFrame's loader (``daft/event_loop.py:28``) that runs with
two workers when nothing ran it first, and the hang's advice ("bound the blocking call") was
wrong.

So when forked workers hang and none of them returned any item, the check runs a control: a
fresh interpreter loads the target, forks one worker the same way and fetches the same item (the
first of a stream), without using the pipeline in its own process first. If that returns within
the timeout, the hang is the fork after use, and the finding says so with the threads this process
held when it forked (thread names from ``/proc``: Daft's read ``DAFTIO-0``, ``DAFTCPU-0``,
``tokio-rt-worker``); if it hangs too, the sample hangs wherever it is fetched. For a stream,
the fresh interpreter then compares two forked workers' streams (the duplicates probe, which the
hang stopped here), so an unsharded stream is still found. A control that
cannot run (a loader passed as an object, not a TARGET a fresh interpreter can load; a check
budget spent) is said, and the finding keeps its first reading. ``doctor`` then measures in its
own process only (``commands/doctor.py``, ``forked_workers_hang``): every worker trial would wait
out its timeout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..runtime.processes import no_orphans

OWN_THREADS = "stallscope-"  # the prefix of every thread stallscope starts
_NUMBERED = re.compile(r"[-_ ]?\d+$")
# Python's main thread, and threads nobody named (``Thread-3 (_run)``): a progress bar's refresh
# thread as much as a library's.
_ANONYMOUS = re.compile(r"^(MainThread|Thread-\d+( \(.*\))?)$")
# The control's own start-up (importing torch and the target) on top of the fetch's timeout.
STARTUP_S = 30.0


def threads_here() -> list[str]:
    """The named threads of this process besides the calling one and stallscope's own, by name
    and count (``DAFTIO ×2``): Python's by their ``Thread.name``, native ones by the name the OS
    holds (``/proc``; Linux only). Threads nobody named are left out (a native one carries the
    process's own name, as OpenMP's pool does; a Python one reads ``Thread-N``)."""
    python = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    me = threading.get_native_id()
    names: list[str] = []
    try:
        tasks = os.listdir("/proc/self/task")
        process_name = Path("/proc/self/comm").read_text().strip()
    except OSError:
        tasks, process_name = [], ""
    seen = set()
    for task in tasks:
        tid = int(task)
        seen.add(tid)
        if tid == me or tid == os.getpid():
            continue
        if tid in python:
            name = python[tid]
        else:
            try:
                name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
            except OSError:
                continue
            if name == process_name:
                continue  # never named: a pool such as OpenMP's, which fork leaves alone
        names.append(name)
    names += [name for tid, name in python.items() if tid not in seen and tid != me]
    names = [n for n in names if not n.startswith(OWN_THREADS) and not _ANONYMOUS.match(n)]
    counts = Counter(_NUMBERED.sub("", n) or n for n in names)
    return [f"{name} ×{n}" if n > 1 else name for name, n in sorted(counts.items())]


def loadable_target(target: str) -> bool:
    """Whether a fresh interpreter can load ``target`` (a ``file.py:fn`` or ``module:fn`` spec)."""
    where, _, name = target.rpartition(":")
    return bool(where and name.isidentifier())


def run_control(
    target: str,
    index: int | None,
    *,
    iterable: bool,
    timeout: float,
    batch_size: int,
    workdir: Path,
) -> dict[str, Any]:
    """Fetch ``index`` (the first item of a stream where ``iterable``) in one worker forked from a
    fresh interpreter that loaded ``target`` and did nothing else with it. Returns ``{returned,
    seconds, where, note}``: ``returned`` None where the control could not say."""
    out = workdir / "fork-control.json"
    code = (
        "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
        "from stallscope.checks.fork_control import control_main; control_main(sys.argv[2:])"
    )
    args = [json.dumps(sys.path), target, json.dumps(index), str(timeout), str(batch_size)]
    args += ["iterable" if iterable else "map", str(out)]
    # A stream's workers are compared there too (the sharding probe), after the fetch.
    limit = timeout + STARTUP_S + (sharding_seconds(timeout) if iterable else 0.0)
    started = time.monotonic()
    with no_orphans():
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=limit,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return unknown(f"the fresh interpreter did not finish within {limit:g} s")
        except OSError as exc:
            return unknown(f"the fresh interpreter could not start: {exc}")
    try:
        result: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return unknown(f"the fresh interpreter exited with code {proc.returncode}: {tail[0]}")
    result["wall_s"] = round(time.monotonic() - started, 2)
    return result


def sharding_seconds(timeout: float) -> float:
    """What the fresh interpreter may spend comparing a stream's workers."""
    return min(STARTUP_S, 16 * timeout)


def unknown(why: str) -> dict[str, Any]:
    """A control that could not say whether the item returns, and why."""
    return {"returned": None, "seconds": None, "where": None, "note": why}


def control_main(argv: list[str]) -> None:
    """Runs in the fresh interpreter: load the target, fetch one item in one forked worker."""
    from ..target import load_target
    from .health import HealthSettings, probe_health

    target, index, timeout, batch_size, kind, out = argv
    wait = float(timeout)
    pipeline = load_target(target)
    settings = HealthSettings(
        timeout=wait,
        deadline=time.monotonic() + wait + STARTUP_S / 2,
        workers=1,
        start_method="fork",
        batch_size=int(batch_size),
        startup_timeout=wait + STARTUP_S / 2,
        sample_limit=1 if kind == "iterable" else None,
        max_hangs=1,
    )
    workdir = Path(out).parent / "fork-control"
    workdir.mkdir(exist_ok=True)
    record, _ = probe_health(
        pipeline,
        settings,
        order=None if kind == "iterable" else [json.loads(index)],
        workdir=workdir,
    )
    hangs = record.get("hangs") or []
    fetched = bool(record.get("fetched")) and not hangs
    result: dict[str, Any] = {
        "returned": True if fetched else (False if hangs else None),
        "seconds": (record.get("timing") or {}).get("max_s") if fetched else None,
        "where": hangs[0].get("where") if hangs else None,
        "note": None,
    }
    if result["returned"] and kind == "iterable":
        # The workers' streams, compared where they run: the duplicates probe the hang stopped.
        from .sharding import probe_sharding

        result["sharding"] = probe_sharding(
            pipeline,
            workers=2,
            start_method="fork",
            deadline=time.monotonic() + sharding_seconds(wait),
            timeout=wait,
            startup=STARTUP_S / 2,
        )
    if result["returned"] is None:
        problem = record.get("init_error") or (record.get("errors") or [None])[0] or {}
        result["note"] = "the fresh worker neither returned the item nor hung: " + str(
            problem.get("message") or "nothing was fetched"
        )
    Path(out).write_text(json.dumps(result))
