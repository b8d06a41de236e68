"""Long runs in a profile: the time windows and the memory drift, as text lines and document blocks.

Reads the profile's ``windows``, ``window_s``, ``memory_drift`` and
``distributed.windows`` (stallscope.training.windows, stallscope.analysis.drift).
The console summary takes :func:`long_run_lines`; the Markdown/HTML report's
training section takes :func:`long_run_blocks` (with the ``over_time`` plot).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..analysis.readers import number
from ..record.model import Window, windows_of
from . import document_model as dm
from . import report_format as rf

# Rows of the windows table in a report; longer runs show evenly spaced windows (all are in the
# JSON).
TABLE_ROWS = 24


def _mb(value: Any) -> str:
    return rf.fmt_mib(number(value))


def _pct(value: Any) -> str:
    return rf.fmt_fraction(number(value))


def _duration(value: Any) -> str:
    v = number(value)
    return "0 s" if v == 0 else rf.fmt_seconds(v)


def windows_line(profile: dict[str, Any]) -> str | None:
    """How stall and step time moved over the windows, in one sentence."""
    windows = windows_of(profile)
    if not windows:
        return None
    size = number(profile.get("window_s"))
    text = f"windows of {_duration(size)} from 0 s to {_duration(windows[-1].end_s)}"
    stalls = [(w.stall_fraction, w) for w in windows if w.stall_fraction is not None]
    if stalls:
        low, high = min(stalls, key=lambda s: s[0]), max(stalls, key=lambda s: s[0])
        text += (
            f": stall fraction {_pct(low[0])} to {_pct(high[0])} per window (worst: window "
            f"{high[1].index}, from {_duration(high[1].start_s)})"
        )
    p50 = [w.step_ms_p50 for w in windows if w.step_ms_p50 is not None]
    if p50:
        text += f"; median step {rf.fmt_ms(min(p50))} to {rf.fmt_ms(max(p50))}"
    slowest = [
        w.get("slowest_rank") for w in (profile.get("distributed") or {}).get("windows") or []
    ]
    if slowest:
        rank, count = Counter(slowest).most_common(1)[0]
        text += f"; slowest rank per window: rank {rank} in {count} of {len(slowest)}"
    return text


def drift_line(drift: dict[str, Any] | None) -> str | None:
    """The memory drift verdict with its numbers, in one sentence."""
    if not isinstance(drift, dict):
        return None
    if drift.get("verdict") is None:
        return f"memory drift: not judged ({drift.get('reason') or 'no readings'})"
    per = drift.get("per") or "samples"
    worst = drift.get("worst") or {}
    name = worst.get("process", "memory")
    grew = (
        f"{name} {_mb(worst.get('start_mb'))} → {_mb(worst.get('end_mb'))} over "
        f"{drift.get('windows')} windows"
    )
    rates = f"{_mb(worst.get('mb_per_1000'))} per thousand {per} it handled"
    if number(worst.get("mb_per_hour")) is not None:
        rates += f", {_mb(worst['mb_per_hour'])} per hour"
    verdict = drift["verdict"]
    if verdict == "growing":
        others = [g for g in drift.get("growing") or [] if g != name]
        also = f" (also growing: {', '.join(others)})" if others else ""
        return f"memory drift: growing: {grew}, {rates}, no plateau{also}"
    if verdict == "plateaued":
        after = worst.get("after_plateau_mb_per_1000")
        since = f"; {_mb(after)} per thousand {per} since" if number(after) is not None else ""
        return (
            f"memory drift: plateaued: {grew}, levelled off after "
            f"{rf.fmt_count(worst.get('plateaued_after'))} {per} it handled{since}"
        )
    return (
        "memory drift: flat: no process grew by the memory-growth rule's "
        f"{_mb(drift.get('minimum_mb'))} ({grew}, {rates})"
    )


def long_run_lines(profile: dict[str, Any]) -> list[str]:
    """Console lines (indented like the rest of the profile summary); none for a run that fitted in
    one window (under torchrun: the job's windows, as the slowest rank saw them, not only this
    rank's)."""
    own = len(windows_of(profile))
    job = len((profile.get("distributed") or {}).get("windows") or [])
    if max(own, job) < 2:
        return []
    lines = []
    windows = windows_line(profile)
    if windows:
        lines.append(f"  {windows}")
    drift = drift_line(profile.get("memory_drift"))
    if drift:
        lines.append(f"  {drift}")
    return lines


def long_run_blocks(profile: dict[str, Any]) -> list[Any]:
    """The training section's part on time windows: two sentences, the over-time plot, a table of
    windows."""
    windows = windows_of(profile)
    if len(windows) < 2:
        return []  # one window says nothing the run's own figures do not
    blocks: list[Any] = []
    text = [
        s[0].upper() + s[1:] + "."
        for s in (windows_line(profile), drift_line(profile.get("memory_drift")))
        if s
    ]
    blocks.append(dm.Paragraph([" ".join(text)]))
    blocks.append(dm.Figure("over_time", "Stall fraction and memory per time window"))
    stride = max(1, -(-len(windows) // TABLE_ROWS))
    shown = windows[::stride]
    if shown[-1] is not windows[-1]:
        shown.append(windows[-1])
    note = f"One window in {stride} shown; the JSON record holds all {len(windows)}."
    caption = [] if stride == 1 else [dm.Paragraph([note])]
    blocks.append(
        dm.table(
            shown,
            [
                dm.Column("window", lambda w: rf.fmt_count(w.index)),
                dm.Column("from", lambda w: _duration(w.start_s), "r"),
                dm.Column("steps", lambda w: rf.fmt_count(w.total_steps), "r"),
                dm.Column("stall", lambda w: _pct(w.stall_fraction), "r"),
                dm.Column("step p50", lambda w: _ms(w.step_ms_p50), "r"),
                dm.Column("step p95", lambda w: _ms(w.step_ms_p95), "r"),
                dm.Column("main RSS", lambda w: _mb(w.main_rss_mb), "r"),
                dm.Column("largest worker RSS", _largest_worker_rss, "r"),
                dm.Column("mean worker USS", lambda w: _mb(w.worker_uss_mb), "r"),
            ],
        )
    )
    return blocks + caption


def _largest_worker_rss(window: Window) -> str:
    rss = [worker.rss_mb for worker in window.workers if worker.rss_mb is not None]
    return _mb(max(rss)) if rss else "–"


def _ms(value: Any) -> str:
    return rf.fmt_ms(number(value))
