"""Time windows of a long training run: stall, step time and memory per window (issue 20).

A week-long run needs more than one figure per epoch: the watch cuts the run
into windows of ``window_s`` seconds (counted from the first batch request)
and gives each one its steps, stall fraction, step time, data wait, CPU and
memory of the main process and of every worker.

The step figures come from the per-step arrays the watch already keeps
(:func:`step_windows`): nothing is added to the hot path (NOTE [watch hot
path] in watch.py). The resource figures come from the sampler's readings,
folded as they arrive into one small slot per window
(:class:`ResourceWindows`), so memory stays bounded however long the run.
Readings are placed by ``time.perf_counter``, the watch's default clock; a
watch given another ``clock`` gets windows without resource figures that
line up only if that clock does.

Closed windows go to a JSON-lines file as they close and to TensorBoard
(:class:`WindowSink`); :func:`read_windows` reads such a file back. The
memory drift over the windows is judged by :mod:`stallscope.analysis.drift`, from the windows and
the pass length recorded here.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..stats import quantile

# Real runs: one window a minute (a week is ~10,000 windows).
DEFAULT_WINDOW_S = 60.0
# How often (in steps) the window sink looks for windows that closed.
WINDOW_CHECK_EVERY = 32


def window_index(t: float, origin: float, window_s: float) -> int:
    return max(0, int((t - origin) // window_s))


def step_windows(
    t_req: Sequence[float],
    data_s: Sequence[float],
    compute_s: Sequence[float],
    *,
    epoch_starts: Sequence[int],
    warmup: int,
    origin: float,
    window_s: float,
    batch_size: int | None = None,
    start: int = 0,
    end: int | None = None,
) -> list[dict[str, Any]]:
    """Windows of the closed steps ``[start, end)``: steps, stall fraction, step time, data wait.

    A step belongs to the window its batch request falls in. Stall fraction
    and step times cover the steady steps (not an epoch's first batch, not
    warm-up, as the profile's own figures); ``total_steps`` counts them all.
    Windows without steps (a pause for validation) are left out. The last
    window is ``partial`` when the recorded steps end before it does. Reads
    only the steps in the range: the watch calls it as windows close.
    """
    closed_end = min(len(compute_s), len(data_s))
    end = closed_end if end is None else min(end, closed_end)
    if end <= start:
        return []
    firsts = {s for s in epoch_starts if start <= s < end}
    windows: list[dict[str, Any]] = []
    i = start
    while i < end:
        k = window_index(t_req[i], origin, window_s)
        j = bisect.bisect_left(t_req, origin + (k + 1) * window_s, i + 1, end)
        steady = [
            s
            for s in range(i, j)
            if s >= warmup and s not in firsts and math.isfinite(compute_s[s])
        ]
        windows.append(_window(k, i, j, data_s, compute_s, steady, window_s, batch_size))
        i = j
    last = windows[-1]
    j = last["end_step"]
    ended = (
        t_req[j - 1]
        - origin
        + data_s[j - 1]
        + (compute_s[j - 1] if math.isfinite(compute_s[j - 1]) else 0.0)
    )
    last["partial"] = j == closed_end and ended < last["end_s"]
    return windows


def _window(
    k: int,
    i: int,
    j: int,
    data_s: Sequence[float],
    compute_s: Sequence[float],
    steady: list[int],
    window_s: float,
    batch_size: int | None,
) -> dict[str, Any]:
    data = sum(data_s[s] for s in steady)
    compute = sum(compute_s[s] for s in steady)
    steps_ms = sorted((data_s[s] + compute_s[s]) * 1000 for s in steady)
    p50, p95 = (quantile(steps_ms, q, ordered=True) for q in (0.5, 0.95))
    busy = data + compute
    return {
        "index": k,
        "start_s": round(k * window_s, 3),
        "end_s": round((k + 1) * window_s, 3),
        "first_step": i,
        "end_step": j,  # steps done by the window's end (cumulative)
        "end_samples": j * batch_size if batch_size else None,
        "total_steps": j - i,
        "steps": len(steady),
        "stall_fraction": round(data / busy, 4) if busy > 0 else None,
        "data_wait_s": round(data, 6),
        "data_ms_mean": round(data / len(steady) * 1000, 4) if steady else None,
        "step_ms_p50": None if p50 is None else round(p50, 4),
        "step_ms_p95": None if p95 is None else round(p95, 4),
        "steps_per_s": round(len(steady) / busy, 3) if busy > 0 else None,
        "partial": False,
    }


class ResourceWindows:
    """Resource readings folded into one slot per window as they arrive (from the sampler's thread).

    Per window: the mean CPU % of the readings in it, and the memory at its
    end (the latest reading): main RSS, workers' total RSS, each worker's RSS
    and, where read, USS. ``origin`` is set by the watch at its first batch request.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.origin: float | None = None
        self._slots: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, at: float, tick: Any) -> None:
        """``ResourceSampler``'s ``on_tick``: one reading taken at ``at`` (perf_counter)."""
        if self.origin is None:
            return
        k = window_index(at, self.origin, self.window_s)
        with self._lock:
            slot = self._slots.get(k)
            if slot is None:
                slot = self._slots[k] = {
                    "readings": 0,
                    "main_cpu": 0.0,
                    "workers_cpu": 0.0,
                    "uss": None,
                    "dirty": None,
                }
            slot["readings"] += 1
            slot["main_cpu"] += tick.main_cpu_percent
            slot["workers_cpu"] += tick.workers_cpu_percent
            slot["main_rss_mb"] = tick.main_rss_mb
            slot["main_anon_mb"] = tick.main_anon_mb
            rss = list(tick.worker_rss_mb or [])
            # A reading with fewer workers than an earlier one of the same window was taken as
            # they shut down (a loop that ends shuts its loader's workers down before the
            # sampler's last reading of the epoch): the window keeps the readings that had them
            # all, as it does where the workers ended just after it.
            if len(rss) >= len(slot.get("rss") or []):
                slot["workers_rss_mb"] = tick.workers_rss_mb
                slot["rss"] = rss
                slot["anon"] = list(tick.worker_anon_mb or [])
                if tick.worker_uss_each is not None:
                    slot["uss"] = list(tick.worker_uss_each)
                    slot["dirty"] = list(tick.worker_dirty_each or [])

    def figures(self, k: int) -> dict[str, Any]:
        """Window ``k``'s resource figures (None values where nothing was read in it)."""
        with self._lock:
            slot = self._slots.get(k)
            slot = dict(slot) if slot is not None else None
        if slot is None:
            return {
                "main_cpu_percent": None,
                "workers_cpu_percent": None,
                "main_rss_mb": None,
                "main_anon_mb": None,
                "workers_rss_mb": None,
                "worker_uss_mb": None,
                "workers": [],
            }
        n = slot["readings"]
        rss = slot["rss"]
        # a worker that came or went between a window's readings: no pairing, no figures
        uss, anon, dirty = (_paired(slot.get(key), rss) for key in ("uss", "anon", "dirty"))
        workers = [
            {
                "worker": w,
                "rss_mb": r,
                "anon_mb": anon[w],
                "uss_mb": uss[w],
                "dirty_mb": dirty[w],
            }
            for w, r in enumerate(rss)
        ]
        read = [u for u in uss if u is not None]
        return {
            "main_cpu_percent": round(slot["main_cpu"] / n, 1),
            "workers_cpu_percent": round(slot["workers_cpu"] / n, 1),
            "main_rss_mb": slot["main_rss_mb"],
            "main_anon_mb": slot.get("main_anon_mb"),
            "workers_rss_mb": slot["workers_rss_mb"],
            "worker_uss_mb": round(sum(read) / len(read), 1) if read else None,
            "workers": workers,
        }


def _paired(values: list[float | None] | None, readings: list[Any]) -> list[float | None]:
    """``values`` per worker where they pair with ``readings`` (one each), else Nones."""
    if values and len(values) == len(readings):
        return list(values)
    return [None] * len(readings)


def with_resources(
    windows: list[dict[str, Any]], resources: ResourceWindows | None
) -> list[dict[str, Any]]:
    """The windows with their resource figures (in place; None figures without readings)."""
    for w in windows:
        w.update(
            resources.figures(w["index"])
            if resources is not None
            else ResourceWindows(1.0).figures(0)
        )
    return windows


# -- JSON lines and TensorBoard -------------------------------------------------------------
class WindowSink:
    """Appends each closed window to a JSON-lines file and/or TensorBoard scalars (a
    :class:`~.sinks.StepSink`).

    Every ``WINDOW_CHECK_EVERY`` steps it asks the watch for the windows that
    closed since its last write (the latest step's request falls in a later
    window); at close, the last (partial) window is written too. One line per
    window, ``{"kind": "window", "name": ..., "rank": ..., **window}``, flushed
    at once, so a run that dies leaves every closed window on disk.
    """

    every = WINDOW_CHECK_EVERY

    def __init__(self, path: str | Path | None, writer: Any = None) -> None:
        self.path = None if path is None else Path(path)
        self._writer = writer
        self._handle: IO[str] | None = None
        self._upto = 0  # steps already written in windows
        self._source: Any = None

    def write(self, source: Any) -> None:
        self._source = source
        self._emit(source.closed_windows(self._upto, final=False))

    def flush(self, source: Any) -> None:
        self.write(source)

    def close(self) -> None:
        if self._source is not None:
            self._emit(self._source.closed_windows(self._upto, final=True))
            self._source = None
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass

    def _emit(self, windows: list[dict[str, Any]]) -> None:
        if not windows:
            return
        self._upto = windows[-1]["end_step"]
        name = getattr(self._source, "name", None)
        rank = getattr(self._source, "rank", None)
        if self.path is not None:
            handle = self._open(self.path)
            lines = (
                json.dumps({"kind": "window", "name": name, "rank": rank, **w}) + "\n"
                for w in windows
            )
            handle.write("".join(lines))
            handle.flush()
        if self._writer is not None:
            for w in windows:
                _scalars(self._writer, f"stallscope/{name}/window", w)

    def _open(self, path: Path) -> IO[str]:
        if self._handle is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a")
        return self._handle


_SCALARS = (
    "stall_fraction",
    "step_ms_p50",
    "step_ms_p95",
    "data_ms_mean",
    "main_cpu_percent",
    "workers_cpu_percent",
    "main_rss_mb",
    "main_anon_mb",
    "workers_rss_mb",
    "worker_uss_mb",
)


def _scalars(writer: Any, prefix: str, window: dict[str, Any]) -> None:
    """One window as TensorBoard scalars, at the step count of its end."""
    try:
        for key in _SCALARS:
            if window.get(key) is not None:
                writer.add_scalar(f"{prefix}/{key}", window[key], window["end_step"])
        for w in window.get("workers") or []:
            for key in ("rss_mb", "anon_mb", "uss_mb", "dirty_mb"):
                if w.get(key) is not None:
                    writer.add_scalar(
                        f"{prefix}/worker{w['worker']}_{key}", w[key], window["end_step"]
                    )
    except Exception:  # a user's writer that fails must not break the training loop
        pass


def windows_path_for(jsonl: str | Path) -> Path:
    """Where windows go when only the per-step ``jsonl=`` file is given: ``run.jsonl`` ->
    ``run.windows.jsonl``."""
    path = Path(jsonl)
    return path.with_name(f"{path.stem}.windows{path.suffix or '.jsonl'}")


def read_windows(
    path: str | Path, *, name: str | None = None, rank: int | None = None
) -> list[dict[str, Any]]:
    """The windows of a JSON-lines file written by ``windows_jsonl=`` (or next to ``jsonl=``), in
    order.

    ``name``/``rank`` keep one watch's or one rank's windows when several
    wrote to the same file. A torn last line (the run was killed while
    writing) is skipped; any other line that is not a window is an error.
    """
    windows = []
    lines = Path(path).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the run died mid-line
            raise ValueError(f"{path}:{number} is not a JSON line") from None
        if not isinstance(entry, dict) or entry.get("kind") != "window":
            raise ValueError(f'{path}:{number} is not a stallscope window (no "kind": "window")')
        if (name is not None and entry.get("name") != name) or (
            rank is not None and entry.get("rank") != rank
        ):
            continue
        windows.append({k: v for k, v in entry.items() if k not in ("kind", "name")})
    return windows


def long_run_section(
    windows: list[dict[str, Any]], window_s: float, epoch_steps: int | None, batch_size: int | None
) -> dict[str, Any]:
    """The profile's ``window_s``, ``windows`` and ``pass_samples`` (one epoch, in samples, or in
    steps without a batch size: the pass the memory drift is judged over)."""
    epoch = epoch_steps * batch_size if epoch_steps and batch_size else epoch_steps
    return {"window_s": window_s, "windows": windows, "pass_samples": epoch}


def windows_record(
    path: str | Path, *, name: str | None = None, rank: int | None = None
) -> dict[str, Any]:
    """A ``profile`` record rebuilt from a windows JSON-lines file, for
    ``stallscope report run.windows.jsonl``.

    The run's stall fraction and steps are the sums over its windows; the
    verdict and the memory drift are judged by ``report`` like any record's
    (without the epoch length, which the file does not hold: the plateau test
    takes the run's first two thirds as one pass).
    """
    from .. import __version__

    windows = read_windows(path, name=name, rank=rank)
    if not windows:
        raise ValueError(f"{path} holds no windows")
    ranks = {w.get("rank") for w in windows}
    if len(ranks) > 1 or len({w["index"] for w in windows}) != len(windows):
        raise ValueError(
            f"{path} holds the windows of several runs or ranks; pass name= or rank= to pick one"
        )
    for w in windows:
        w.pop("rank", None)
    data = sum(w.get("data_wait_s") or 0.0 for w in windows)
    busy = sum(w["steps"] / w["steps_per_s"] for w in windows if w.get("steps_per_s"))
    stall = data / busy if busy > 0 else None
    return {
        "schema": 1,
        "tool_version": __version__,
        "command": "profile",
        "target": str(path),
        "host": {},
        "steps": sum(w.get("steps") or 0 for w in windows),
        "total_steps": windows[-1]["end_step"],
        "stall_fraction": None if stall is None else round(stall, 4),
        "window_s": windows[0]["end_s"] - windows[0]["start_s"],
        "windows": windows,
    }
