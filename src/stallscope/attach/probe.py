"""Sampling a running training job from outside: the record's ``attach_capture``.

NOTE [attach sampling]
py-spy samples the target and every descendant (``--subprocesses``) at ``rate_hz`` for
``duration_s``, idle threads too (``--idle``: a training thread blocked on the loader's queue is
the very thing to count), without pausing anyone (``--nonblocking``: it reads the target's memory
while it runs, so a stack can now and then be torn; those are rare single samples and count as
whatever frames they show). The capture keeps every thread's samples in time order, run-length
coded over a table of distinct stacks (root first) and frames: that is enough to recount every
figure later (``stallscope report``) and to see how long a thread stayed in one stack, and it is
small (a thread blocked for the whole window is one run). Which thread trains, which process is a
worker, and what each sample means is ``analysis/attach.py``'s to judge.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from .frames import describe_frames
from .processes import ProcessInfo, process_tree, target_process, training_processes
from .pyspy import find_py_spy, parse_speedscope, record_speedscope, run_lengths


@dataclass
class AttachCapture:
    pid: int
    duration_s: float
    rate_hz: int
    interval_s: float
    started_at: float
    trainers: list[int]
    whole_tree: bool
    processes: list[ProcessInfo]
    frames: list[dict[str, Any]]
    stacks: list[list[int]]
    threads: list[dict[str, Any]]
    sampler: str | None = None
    sampler_errors: int | None = None  # samples py-spy could not read (a torn stack)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "duration_s": self.duration_s,
            "rate_hz": self.rate_hz,
            "interval_s": self.interval_s,
            "started_at": self.started_at,
            "trainers": list(self.trainers),
            "whole_tree": self.whole_tree,
            "sampler": self.sampler,
            "sampler_errors": self.sampler_errors,
            "processes": [p.to_dict() for p in self.processes],
            "frames": self.frames,
            "stacks": self.stacks,
            "threads": self.threads,
            "notes": list(self.notes),
        }


def attach(
    pid: int,
    *,
    duration_s: float = 30.0,
    rate_hz: int = 100,
    whole_tree: bool = False,
    binary: str | None = None,
) -> AttachCapture:
    """Sample process ``pid`` and its descendants (NOTE [attach sampling])."""
    process = target_process(pid)
    duration_s = float(max(1, round(duration_s)))  # py-spy samples whole seconds
    binary = binary or find_py_spy()
    tree = process_tree(process)
    trainers = training_processes(tree, whole_tree=whole_tree)
    started = time.time()
    document, errors = record_speedscope(pid, duration_s=duration_s, rate_hz=rate_hz, binary=binary)
    capture = parse_speedscope(document)
    known = {p.pid for p in tree}
    for seen, parent in capture.parents.items():  # processes started while sampling
        if seen not in known:
            tree.append(ProcessInfo(seen, parent, "?", "", None))
            known.add(seen)
    threads = [
        {"pid": t.pid, "tid": t.tid, "name": t.name, "runs": run_lengths(t.samples)}
        for t in capture.threads
    ]
    return AttachCapture(
        pid=pid,
        duration_s=float(duration_s),
        rate_hz=int(rate_hz),
        interval_s=capture.interval_s or 1.0 / rate_hz,
        started_at=started,
        trainers=trainers,
        whole_tree=whole_tree,
        processes=tree,
        frames=describe_frames(capture.frames),
        stacks=[list(s) for s in capture.stacks],
        threads=threads,
        sampler=_version(binary),
        sampler_errors=errors,
    )


def _version(binary: str | None) -> str | None:
    if binary is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        return done.stdout.strip() or None
    return None
