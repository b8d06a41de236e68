"""PNG plots of a run record (matplotlib, Agg, no pyplot state).

Each plot has a figure builder (record dict -> Figure, or None when the record
lacks the data), named in :data:`PLOTS`; :func:`write_plot` writes one as a PNG,
:func:`render_plots` writes every plot the record supports into a folder;
:func:`plot_png` returns one plot's PNG bytes (the HTML report embeds them as
data URIs).
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..analysis import readers as rd
from ..analysis import stage_facts
from ..analysis.sweep_epochs import best_result
from ..record.model import BatchMs, BenchResult, Spread, results_of, windows_of

DPI = 100
COLORS = {
    "measured": "#2f6db5",
    "ideal": "#8a8f98",
    "best": "#d1495b",
    "data": "#e07b39",
    "compute": "#2f6db5",
    "baseline": "#8a8f98",
}
STAGE_COLORS = [
    "#2f6db5",
    "#e07b39",
    "#3a9d5d",
    "#d1495b",
    "#8e6cc0",
    "#c9a227",
    "#4fb3bf",
    "#a0522d",
    "#6b7a8f",
]
# Keys LoaderConfig drops at num_workers=0; a 0-worker result joins every series that agrees on the
# rest.
_WORKER_ONLY_KEYS = (
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "multiprocessing_context",
    "in_order",
)


def _new_figure(width: float, height: float) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, color="#e3e6ea", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _save(fig: Figure | None, target: Any) -> bool:
    if fig is None:
        return False
    fig.tight_layout()
    # No "Software" text chunk: the PNG carries no URL and is byte-stable.
    fig.savefig(
        target,
        format="png",
        dpi=DPI,
        metadata={"Software": None},
        bbox_inches="tight",
        pad_inches=0.15,
    )
    return True


# -- throughput vs workers -----------------------------------------------------
def scaling_figure(record: Any) -> Figure | None:
    r = rd.as_record_dict(record)
    results = rd.ok_results(r)
    workers = sorted({rd.workers_of(res.config) for res in results})
    if len(workers) < 2:
        return None
    series = _scaling_series(results)
    fig, ax = _new_figure(7.5, 4.2)
    for i, (name, points) in enumerate(series.items()):
        points.sort(key=lambda p: p[0])
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        low = [max(0.0, p[1] - p[2]) for p in points]
        high = [max(0.0, p[3] - p[1]) for p in points]
        color = COLORS["measured"] if i == 0 else STAGE_COLORS[(i + 1) % len(STAGE_COLORS)]
        ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            marker="o",
            color=color,
            capsize=3,
            linewidth=1.8,
            linestyle="-" if len(points) > 1 else "none",
            label=name if len(series) > 1 else "measured (median, min–max)",
        )
    failed = sorted({rd.workers_of(res.config) for res in results_of(r) if res.error})
    if failed:
        ax.scatter(
            failed,
            [0] * len(failed),
            marker="x",
            s=70,
            color=COLORS["best"],
            zorder=5,
            clip_on=False,
            label="failed",
        )
    shown = sorted(set(workers) | set(failed))
    ideal = (r.get("scaling") or {}).get("ideal_samples_per_s") or {}
    ideal_points = sorted(
        (int(k), rd.number(v))
        for k, v in ideal.items()
        if str(k).isdigit() and int(k) in workers and rd.number(v)
    )
    if len(ideal_points) >= 2:
        ax.plot(
            [p[0] for p in ideal_points],
            [p[1] for p in ideal_points],
            linestyle="--",
            color=COLORS["ideal"],
            linewidth=1.5,
            label="ideal: min(cores, workers) / per-sample cost",
        )
    best = best_result(r)
    if best is not None:
        bx, by = rd.workers_of(best.config), best.rate
        ax.scatter(
            [bx],
            [by],
            marker="*",
            s=260,
            color=COLORS["best"],
            zorder=5,
            label=f"best: {rd.config_label(best.config, best.label)}",
        )
    cores = (r.get("scaling") or {}).get("cores") or (r.get("host") or {}).get("cores")
    if isinstance(cores, int) and cores > 0:
        ax.axvline(cores, color="#b0b5bc", linestyle=":", linewidth=1.2)
        ax.annotate(
            "usable cores",
            (cores, 0),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=8,
            color="#6b7280",
            xycoords=("data", "axes fraction"),
        )
    if shown[-1] >= 16:
        ax.set_xscale("symlog", base=2, linthresh=1, linscale=0.5)
    ax.set_xlim(
        -0.4 if shown[-1] >= 16 else -0.05 * shown[-1] - 0.3,
        shown[-1] * (1.25 if shown[-1] >= 16 else 1.05) + 0.3,
    )
    ax.set_xticks(shown)
    ax.set_xticklabels([str(w) for w in shown])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput vs num_workers")
    ax.legend(fontsize=8, frameon=False, loc="best")
    return fig


def _scaling_series(
    results: list[BenchResult],
) -> dict[str, list[tuple[float, float, float, float]]]:
    """Points (workers, median, min, max) per series: configs that differ only in num_workers."""

    def shared(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, repr(v)) for k, v in config.items() if k not in _WORKER_ONLY_KEYS))

    def series_key(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, repr(v)) for k, v in config.items() if k != "num_workers"))

    def point(res: BenchResult) -> tuple[float, float, float, float]:
        spread = res.samples_per_s or Spread()
        median = res.rate or 0.0
        low, high = spread.min, spread.max
        return (
            rd.workers_of(res.config),
            median,
            median if low is None else low,
            median if high is None else high,
        )

    groups: dict[tuple[tuple[str, str], ...], tuple[dict[str, Any], list[BenchResult]]] = {}
    zero = []
    for res in results:
        config = res.config
        if rd.workers_of(config) > 0:
            groups.setdefault(series_key(config), (config, []))[1].append(res)
        else:
            zero.append(res)
    series: dict[str, list[tuple[float, float, float, float]]] = {}
    for config, members in groups.values():
        # A series measured at one worker count stays a lone marker: a line to 0 workers would imply
        # a trend.
        joined = members + [
            z for z in zero if len(members) > 1 and shared(z.config) == shared(config)
        ]
        series[_series_label(config)] = [point(res) for res in joined]
    joined_any = {shared(config) for config, members in groups.values() if len(members) > 1}
    orphans = [z for z in zero if shared(z.config) not in joined_any]
    for z in orphans:
        series[rd.config_label(z.config, z.label)] = [point(z)]
    return series


def _series_label(config: dict[str, Any]) -> str:
    label = rd.config_label(config)
    return " ".join(part for part in label.split() if not part.startswith("w=")) or label


# -- batch latency -----------------------------------------------------------------
def latency_figure(record: Any) -> Figure | None:
    r = rd.as_record_dict(record)
    best = best_result(r)
    if best is None:
        return None
    hist = _histogram(best)
    if hist is None:
        return _percentile_figure(r)
    fig, ax = _new_figure(7.5, 3.8)
    edges, counts = hist
    best_label = rd.config_label(best.config, best.label)
    ax.stairs(counts, edges, fill=True, color=COLORS["measured"], alpha=0.75, label=best_label)
    single = rd.single_process_result(r, rd.batch_size_of(best.config))
    if single is not None and single != best and (s_hist := _histogram(single)) is not None:
        s_edges, s_counts = s_hist
        ax.stairs(
            s_counts,
            s_edges,
            color=COLORS["baseline"],
            linewidth=1.5,
            label=rd.config_label(single.config, single.label),
        )
    latency = best.batch_ms or BatchMs()
    for key, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
        value = getattr(latency, key)
        if value is not None:
            ax.axvline(
                value, color=COLORS["best"], linestyle=style, linewidth=1.2, label=f"{key} of best"
            )
    ax.set_xlabel("wait for the next batch (ms)")
    ax.set_ylabel("batches")
    ax.set_title("Batch latency in steady state")
    ax.legend(fontsize=8, frameon=False)
    return fig


def _histogram(result: BenchResult) -> tuple[list[float], list[float]] | None:
    hist = result.batch_ms_histogram
    if not isinstance(hist, dict):
        return None
    edges = [rd.number(e) for e in hist.get("edges") or []]
    counts = [rd.number(c) for c in hist.get("counts") or []]
    if not counts or len(edges) != len(counts) + 1 or None in edges or None in counts:
        return None
    known_edges = [e for e in edges if e is not None]
    known_counts = [c for c in counts if c is not None]
    if sum(known_counts) <= 0:
        return None
    return known_edges, known_counts


def _percentile_figure(r: dict[str, Any]) -> Figure | None:
    """Without histograms: p50/p95/p99/max per configuration."""
    rows = [
        (rd.config_label(res.config, res.label), res.batch_ms or BatchMs())
        for res in rd.ok_results(r)
    ][:12]
    rows = [(label, lat) for label, lat in rows if lat.p50 is not None]
    if not rows:
        return None
    fig, ax = _new_figure(7.5, 1.2 + 0.38 * len(rows))
    ys = list(range(len(rows)))
    for key, marker in (("p50", "o"), ("p95", "s"), ("p99", "^"), ("max", "x")):
        xs: list[float | None] = [getattr(lat, key) for _, lat in rows]
        pts = [(x, y) for x, y in zip(xs, ys) if x is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=key, s=30)
    ax.set_yticks(ys)
    ax.set_yticklabels([label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("wait for the next batch (ms)")
    ax.set_title("Batch latency percentiles")
    ax.legend(fontsize=8, frameon=False, ncol=4)
    return fig


# -- stages -----------------------------------------------------------------------
def stages_figure(record: Any) -> Figure | None:
    stages = stage_facts(rd.as_record_dict(record))
    if stages is None or not stages.rows or stages.total_ms <= 0:
        return None
    fig, ax = _new_figure(7.5, 1.9)
    ax.grid(False)
    axes_px = 7.5 * DPI * 0.85
    left = 0.0
    for i, row in enumerate(stages.rows):
        if row.doubtful:
            continue
        color = STAGE_COLORS[i % len(STAGE_COLORS)]
        ax.barh(
            [0],
            [row.ms_per_sample],
            left=left,
            color=color,
            edgecolor="white",
            label=f"{row.name} ({row.ms_per_sample:.3g} ms)",
        )
        # Name the segment inside the bar only where the text fits (about 6.5 px per character at 8
        # pt).
        if row.share * axes_px > 6.5 * len(row.name) + 8:
            ax.text(
                left + row.ms_per_sample / 2,
                0,
                row.name,
                ha="center",
                va="center",
                color="white",
                fontsize=8,
            )
        left += row.ms_per_sample
    ax.set_yticks([])
    ax.set_xlim(0, left)
    ax.set_xlabel("ms per sample")
    ax.set_title("Where a sample's time goes")
    # Below the figure's own bottom edge (under the x label); bbox_inches="tight" keeps it in the
    # PNG.
    fig.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    return fig


# -- training timeline -------------------------------------------------------------
def timeline_figure(record: Any) -> Figure | None:
    r = rd.as_record_dict(record)
    timeline = r.get("step_timeline") or {}
    # Missing buckets (None) draw as gaps of zero height.
    data = [rd.number(x) or 0.0 for x in timeline.get("data_ms") or []]
    compute = [rd.number(x) or 0.0 for x in timeline.get("compute_ms") or []]
    n = min(len(data), len(compute))
    if n == 0 or not any(data[:n]) and not any(compute[:n]):
        return None
    data, compute = data[:n], compute[:n]
    stride: int = (
        timeline["stride"]
        if isinstance(timeline.get("stride"), int) and timeline["stride"] > 1
        else 1
    )
    steps = [1 + i * stride for i in range(n)]
    fig, ax = _new_figure(7.5, 3.6)
    # Stacked steps (one artist per series, fast for any number of steps): data wait below, compute
    # above.
    edges = steps + [steps[-1] + stride]
    total = [d + c for d, c in zip(data, compute)]
    ax.stairs(data, edges, fill=True, color=COLORS["data"], label="waiting for data")
    ax.stairs(total, edges, baseline=data, fill=True, color=COLORS["compute"], label="compute")
    ax.set_xlim(1, steps[-1] + stride)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(
        "training step" if stride == 1 else f"training step (mean of every {stride} steps)"
    )
    ax.set_ylabel("ms")
    ax.set_title("Data wait and compute per step")
    ax.legend(fontsize=8, frameon=False)
    return fig


# -- long runs: stall and memory per time window -------------------------------------
def over_time_figure(record: Any) -> Figure | None:
    """Two panels over the run's time windows: stall fraction, then memory (main RSS, each worker's
    RSS, mean USS)."""
    r = rd.as_record_dict(record)
    windows = [w for w in windows_of(r) if w.start_s is not None]
    if len(windows) < 2:
        return None
    span = windows[-1].end_s or 0.0
    scale, unit = (3600.0, "h") if span >= 7200 else (60.0, "min") if span >= 120 else (1.0, "s")
    mid = [((w.start_s or 0.0) + (w.end_s or w.start_s or 0.0)) / 2 / scale for w in windows]
    fig = Figure(figsize=(7.5, 5.2), dpi=DPI)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax in (top, bottom):
        ax.grid(True, color="#e3e6ea", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    stall = [w.stall_fraction for w in windows]
    top.plot(
        mid,
        [None if s is None else s * 100 for s in stall],
        marker="o",
        markersize=3,
        color=COLORS["data"],
        label="stall fraction",
    )
    top.set_ylim(0, 100)
    top.set_ylabel("waiting for data (%)")
    top.set_title("Stall fraction and memory per time window")
    # What the drift judges (NOTE [memory a process made]); RSS and USS in an older record.
    made = any(w.main_anon_mb is not None for w in windows)
    whole = "anonymous" if made else "RSS"
    series = [
        (
            f"main {whole}",
            [w.main_anon_mb if made else w.main_rss_mb for w in windows],
            COLORS["compute"],
            "-",
        )
    ]
    n_workers = max(len(w.workers) for w in windows)
    for k in range(n_workers):
        readings = [w.worker(k) for w in windows]
        series += [
            (
                f"worker {k} {whole}",
                [r.anon_mb if made else r.rss_mb for r in readings],
                STAGE_COLORS[(k + 1) % len(STAGE_COLORS)],
                "-",
            ),
            (
                f"worker {k} {'private dirty' if made else 'USS'}",
                [r.dirty_mb if made else r.uss_mb for r in readings],
                STAGE_COLORS[(k + 1) % len(STAGE_COLORS)],
                "--",
            ),
        ]
    drawn = 0
    for label, values, color, style in series:
        points = [(x, y) for x, y in zip(mid, values) if y is not None]
        if points:
            bottom.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                style,
                marker=".",
                color=color,
                label=label,
            )
            drawn += 1
    if not drawn and not any(s is not None for s in stall):
        return None
    bottom.set_ylabel("MiB")
    bottom.set_xlabel(f"time since the first batch request ({unit})")
    drift: dict[str, Any] = r["memory_drift"] if isinstance(r.get("memory_drift"), dict) else {}
    if drift.get("verdict"):
        bottom.set_title(f"memory: {drift['verdict']}", fontsize=9, loc="left")
    if drawn:
        bottom.legend(fontsize=8, frameon=False, ncol=min(3, drawn), loc="best")
    return fig


# -- entries ------------------------------------------------------------------------
FigureBuilder = Callable[[Any], "Figure | None"]

# name -> figure builder; file names are <name>.png
PLOTS: dict[str, FigureBuilder] = {
    "scaling": scaling_figure,
    "latency": latency_figure,
    "stages": stages_figure,
    "timeline": timeline_figure,
    "over_time": over_time_figure,
}


@functools.lru_cache(maxsize=16)
def _png(name: str, record_json: str) -> bytes | None:
    """One plot of one record, drawn once: Markdown files and HTML data URIs share it."""
    buffer = io.BytesIO()
    return buffer.getvalue() if _save(PLOTS[name](json.loads(record_json)), buffer) else None


def write_plot(name: str, record: Any, path: str | Path) -> Path | None:
    """Write the plot ``name`` (a key of :data:`PLOTS`) of ``record`` as a PNG at ``path``; None
    (and nothing written) when the record lacks its data."""
    data = plot_png(name, record)
    if data is None:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def plot_png(name: str, record: Any) -> bytes | None:
    """One plot's PNG bytes, or None when the record lacks its data."""
    return _png(name, json.dumps(rd.as_record_dict(record), sort_keys=True))


def render_plots(record: Any, folder: str | Path) -> list[Path]:
    """Write every plot the record supports as ``folder/<name>.png``."""
    folder = Path(folder)
    written = []
    for name in PLOTS:
        path = write_plot(name, record, folder / f"{name}.png")
        if path is not None:
            written.append(path)
    return written


class PlotsRenderer:
    """The plots as a renderer: ``render`` gives each plot's PNG bytes by name, ``write`` a folder
    of PNGs."""

    def render(self, record: Any) -> dict[str, bytes]:
        pngs = {name: plot_png(name, record) for name in PLOTS}
        return {name: png for name, png in pngs.items() if png is not None}

    def write(self, record: Any, path: Path) -> list[Path]:
        return render_plots(record, path)
