"""PNG plots: drawn where the record has the data, None where it does not, never blank."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from stallscope.render import plots

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Which fixture records carry the data of which plot.
EXPECTED = {
    "bench": {"scaling", "latency"},
    "tune": set(),
    "check": set(),
    "stages": {"stages"},
    "profile": {"timeline", "over_time"},
    "compare": set(),
    "doctor": {"scaling", "latency", "stages", "timeline"},
}


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"record_{name}.json").read_text())


def assert_real_png(data: bytes) -> None:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    width, height = image.size
    assert width >= 400 and height >= 150
    colours = image.getcolors(maxcolors=width * height)
    background = max(colours)[0]
    # Not one colour, and a meaningful share of drawn (non-background) pixels.
    assert len(colours) > 20
    assert (width * height - background) / (width * height) > 0.03
    assert b"Software" not in data and b"http" not in data


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_render_plots_writes_exactly_the_supported_plots(name, tmp_path):
    written = plots.render_plots(load(name), tmp_path / "plots")
    assert {p.stem for p in written} == EXPECTED[name]
    for path in written:
        assert path.parent == tmp_path / "plots" and path.suffix == ".png"
        assert_real_png(path.read_bytes())


@pytest.mark.parametrize("plot", sorted(plots.PLOTS))
def test_write_plot_returns_its_path_or_none(plot, tmp_path):
    for name, supported in EXPECTED.items():
        if name == "doctor":
            continue  # drawn by the test above
        out = plots.write_plot(plot, load(name), tmp_path / name / f"{plot}.png")
        if plot in supported:
            assert out == tmp_path / name / f"{plot}.png" and out.is_file()
        else:
            assert out is None and not (tmp_path / name).exists()


def test_scaling_plot_has_the_ideal_line_the_best_and_the_failures():
    # The 0.3 bench record holds a failed config and six worker counts; real runs here are smaller.
    fig = plots.scaling_figure(json.loads((FIXTURES / "legacy" / "record_bench.json").read_text()))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ideal: min(cores, workers) / per-sample cost" in labels
    assert "best: w=8 bs=64 pf=4" in labels
    assert "failed" in labels
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "2", "4", "8", "16", "32"]
    ideal = next(line for line in ax.get_lines() if line.get_linestyle() == "--")
    assert list(ideal.get_xdata()) == [0, 2, 4, 8, 16]  # only measured worker counts


def test_scaling_needs_two_worker_counts():
    record = load("bench")
    keep = record["results"][record["scaling"]["best_index"]]["config"]["num_workers"]
    record["results"] = [r for r in record["results"] if r["config"]["num_workers"] == keep]
    assert record["results"]
    record["scaling"]["best_index"] = None
    assert plots.scaling_figure(record) is None


def test_latency_falls_back_to_percentiles_without_histograms():
    record = load("bench")
    for r in record["results"]:
        r.pop("batch_ms_histogram", None)
    fig = plots.latency_figure(record)
    assert fig.axes[0].get_title() == "Batch latency percentiles"
    assert_real_png(_png(fig))
    for r in record["results"]:
        r["batch_ms"] = None
    assert plots.latency_figure(record) is None


def test_timeline_uses_the_bucket_stride():
    record = load("profile")
    record["step_timeline"]["stride"] = 5
    fig = plots.timeline_figure(record)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "training step (mean of every 5 steps)"
    assert ax.get_xlim()[1] == 1 + len(record["step_timeline"]["data_ms"]) * 5


def test_plots_are_deterministic_and_none_without_data():
    record = load("stages")
    assert _png(plots.stages_figure(record)) == _png(plots.stages_figure(copy.deepcopy(record)))
    assert plots.plot_png("stages", record).startswith(b"\x89PNG")
    assert plots.plot_png("timeline", record) is None


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    plots._save(fig, buffer)
    return buffer.getvalue()


def test_memory_over_time_draws_what_the_drift_judges():
    record = load("profile")  # written before the anonymous readings: RSS and USS
    for k, window in enumerate(record["windows"]):
        window["workers"] = [{"worker": 0, "rss_mb": 200.0 + k, "uss_mb": 90.0 + k}]
    labels = _legend(plots.over_time_figure(record))
    assert "worker 0 RSS" in labels and "worker 0 USS" in labels
    for k, window in enumerate(record["windows"]):
        window["main_anon_mb"] = 100.0
        for worker in window["workers"]:
            worker.update(anon_mb=50.0 + k, dirty_mb=20.0 + k)
    labels = _legend(plots.over_time_figure(record))
    assert {"main anonymous", "worker 0 anonymous", "worker 0 private dirty"} <= labels
    assert not any(label.endswith(("RSS", "USS")) for label in labels)


def _legend(fig) -> set[str]:
    return {text.get_text() for text in fig.axes[1].get_legend().get_texts()}
