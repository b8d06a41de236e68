"""Running py-spy against a process and reading what it writes.

py-spy reads the target's memory (``process_vm_readv``) with ``--nonblocking``, so the target is
never paused. ``record --format speedscope`` writes one "sampled" profile per thread, named
``Process PID Thread TID "NAME"``, whose samples are in time order, root frame first, each of
weight ``1 / rate``. With ``--subprocesses`` a stack starts with one pseudo frame per process from
the sampled root down (``process PID:"cmdline"``) and, with ``--threads``, one for the thread
(``thread (TID): NAME``); :func:`parse_speedscope` takes those off and keeps the process chain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

_PROFILE_NAME = re.compile(r'^Process (\d+) Thread (\d+)(?: "(.*)")?\s*$')
_PROCESS_FRAME = re.compile(r"^process (\d+):")
_THREAD_FRAME = re.compile(r"^thread \((\d+)\)")
_COUNTS = re.compile(r"Samples: (\d+) Errors: (\d+)")

PTRACE_HINT = (
    "allow it with `sysctl kernel.yama.ptrace_scope=0` on the host (or run stallscope as the "
    "process's user or root), and in a container start it with `--cap-add SYS_PTRACE`"
)


@dataclass(frozen=True)
class Frame:
    name: str  # py-spy's qualified name: "Class.method", "function", "<module>"
    file: str
    line: int


@dataclass
class ThreadTrace:
    """One thread's samples in time order, as indices into :attr:`Capture.stacks`."""

    pid: int
    tid: int
    name: str
    samples: list[int] = field(default_factory=list)


@dataclass
class Capture:
    """What py-spy saw: frames and stacks (root first, pseudo frames taken off), every thread's
    samples in time order, and each process's parent as the stacks' process chains show it."""

    interval_s: float
    frames: list[Frame]
    stacks: list[tuple[int, ...]]
    threads: list[ThreadTrace]
    parents: dict[int, int | None]


def find_py_spy() -> str | None:
    """The py-spy next to this Python first (the one installed with stallscope), else on PATH."""
    beside = Path(sys.executable).parent / ("py-spy.exe" if os.name == "nt" else "py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def record_speedscope(
    pid: int,
    *,
    duration_s: float,
    rate_hz: int,
    subprocesses: bool = True,
    binary: str | None = None,
) -> tuple[dict[str, Any], int | None]:
    """Sample ``pid`` (and its descendants) for ``duration_s`` without pausing it: py-spy's
    speedscope document, and the samples py-spy says it could not read (None where it does not
    say). One-sentence UsageErrors for the ways it fails that the user can fix."""
    binary = binary or find_py_spy()
    if binary is None:
        raise UsageError(
            "py-spy is not installed; install it with `pip install py-spy` (stallscope attach "
            "samples the process through it)."
        )
    with tempfile.TemporaryDirectory(prefix="stallscope-attach-") as tmp:
        out = Path(tmp) / "profile.json"
        command = [
            binary,
            "record",
            "--pid",
            str(pid),
            "--nonblocking",
            "--idle",
            "--threads",
            "--rate",
            str(rate_hz),
            "--duration",
            str(max(1, round(duration_s))),  # py-spy takes whole seconds
            "--format",
            "speedscope",
            "--output",
            str(out),
        ]
        if subprocesses:
            command.append("--subprocesses")
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=duration_s + 60,
            )
        except subprocess.TimeoutExpired:
            raise UsageError(
                f"py-spy did not finish sampling process {pid} within {duration_s + 60:.0f} s."
            ) from None
        if done.returncode != 0 or not out.is_file():
            raise UsageError(describe_failure(pid, done.stdout + done.stderr))
        try:
            data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"py-spy wrote no readable profile of process {pid}: {exc}.") from None
        return data, sampler_errors(done.stdout + done.stderr)


def sampler_errors(output: str) -> int | None:
    """The samples py-spy reports it could not read (its closing ``Samples: N Errors: M``)."""
    found = _COUNTS.search(output)
    return int(found.group(2)) if found else None


def describe_failure(pid: int, output: str) -> str:
    """py-spy's failure as one sentence (its own output is a Rust backtrace)."""
    text = output.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return f"the kernel refused to let py-spy read process {pid} (ptrace); {PTRACE_HINT}."
    if "failed to find python version" in text or "failed to find a python interpreter" in text:
        return f"process {pid} is not a Python process; pass the PID of the training script."
    if "no such file" in text or "check that the process is running" in text:
        return f"process {pid} ended before py-spy could sample it."
    first = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
    return f"py-spy could not sample process {pid}: {first.removeprefix('Error: ')}"


def parse_speedscope(data: Mapping[str, Any]) -> Capture:
    """The capture in py-spy's speedscope document ``data``."""
    raw_frames = data.get("shared", {}).get("frames", [])
    frames: list[Frame] = []
    remap: dict[int, int] = {}  # speedscope frame index -> ours (pseudo frames have none)
    pseudo: dict[int, tuple[str, int]] = {}
    for index, raw in enumerate(raw_frames):
        name = str(raw.get("name", "?"))
        file = str(raw.get("file") or "")
        process = _PROCESS_FRAME.match(name) if not file else None
        thread = _THREAD_FRAME.match(name) if not file else None
        if process:
            pseudo[index] = ("process", int(process.group(1)))
        elif thread:
            pseudo[index] = ("thread", int(thread.group(1)))
        else:
            remap[index] = len(frames)
            frames.append(Frame(name, file, int(raw.get("line") or 0)))
    stacks: list[tuple[int, ...]] = []
    stack_ids: dict[tuple[int, ...], int] = {}
    threads: list[ThreadTrace] = []
    parents: dict[int, int | None] = {}
    interval = 0.0
    for profile in data.get("profiles", []):
        match = _PROFILE_NAME.match(str(profile.get("name", "")))
        if not match:
            continue
        pid, tid = int(match.group(1)), int(match.group(2))
        trace = ThreadTrace(pid, tid, match.group(3) or "")
        weights: Sequence[float] = profile.get("weights") or []
        if weights and not interval:
            interval = float(weights[0])
        for sample in profile.get("samples", []):
            chain = [pseudo[i][1] for i in sample if pseudo.get(i, ("", 0))[0] == "process"]
            for parent, child in zip([None, *chain], chain):
                parents.setdefault(child, parent)
            stack = tuple(remap[i] for i in sample if i in remap)
            if stack not in stack_ids:
                stack_ids[stack] = len(stacks)
                stacks.append(stack)
            trace.samples.append(stack_ids[stack])
        parents.setdefault(pid, None)
        threads.append(trace)
    return Capture(interval or 0.0, frames, stacks, threads, parents)


def run_lengths(samples: Sequence[int]) -> list[list[int]]:
    """``[[stack, count], ...]``: consecutive equal samples as one run (time order kept)."""
    runs: list[list[int]] = []
    for stack in samples:
        if runs and runs[-1][0] == stack:
            runs[-1][1] += 1
        else:
            runs.append([stack, 1])
    return runs
