"""Batches delivered to the device (NOTE [delivered to the device] in throughput/measure.py).

The copy itself needs a GPU (benchmarks/cuda_paths.py runs it on one); here the ``meta`` device
stands in for it: tensors move there without memory or a driver, so the walk over the batch, the
order of the per-batch steps and the measurement's use of them are tested on any machine.
"""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import torch
from rich.console import Console

import stallscope.throughput.measure as measure_module
from stallscope.config import LoaderConfig
from stallscope.pipeline.structure import to_device
from stallscope.render.console_bench import render_bench
from stallscope.render.markdown import MarkdownRenderer
from stallscope.target import load_target
from stallscope.throughput.measure import chain_steps, delivery_step, measure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
Pair = namedtuple("Pair", "image label")


def test_every_tensor_of_a_nested_batch_moves_and_the_rest_stays():
    batch = {"x": torch.ones(2, 3), "meta": [Pair(torch.zeros(2), 7), "name"]}
    moved = to_device(batch, "meta")
    x, (pair, name) = moved["x"], moved["meta"]
    assert x.is_meta and x.shape == (2, 3)
    assert isinstance(pair, Pair) and pair.image.is_meta and pair.label == 7 and name == "name"
    assert not batch["x"].is_meta  # the host batch is untouched


def test_the_delivery_step_copies_and_returns_the_host_batch(monkeypatch):
    seen = []
    monkeypatch.setattr(
        measure_module,
        "to_device",
        lambda batch, device, non_blocking: seen.append((device.type, non_blocking)),
    )
    batch = torch.ones(4)
    for pinned in (True, False):
        step = delivery_step(LoaderConfig(pin_memory=pinned), "meta")
        assert step is not None and step(batch) is batch
    assert seen == [("meta", True), ("meta", False)]  # non_blocking only from pinned memory


def test_without_a_device_there_is_no_delivery_step(monkeypatch):
    monkeypatch.setattr(measure_module, "cuda_available", lambda: False)
    assert delivery_step(LoaderConfig()) is None


def test_steps_chain_in_order_and_none_drops_out():
    assert chain_steps(None, None) is None
    double = lambda b: b * 2  # noqa: E731
    assert chain_steps(None, double) is double
    assert chain_steps(double, lambda b: b + 1, None)(3) == 7


def test_a_measurement_delivers_every_batch_after_the_main_step(monkeypatch):
    order = []
    monkeypatch.setattr(
        measure_module, "to_device", lambda batch, device, non_blocking: order.append("copy")
    )

    def main_step(batch):
        order.append("step")
        return batch

    pipeline = load_target(torch.utils.data.TensorDataset(torch.arange(64.0)), batch_size=4)
    m = measure(
        pipeline,
        LoaderConfig(batch_size=4),
        min_window_s=0.0,
        min_batches=5,
        main_step=main_step,
        device="meta",
    )
    steps = order.count("step")
    # Every batch after the first (start-up) takes the main step, then the copy.
    assert steps >= m.batches and order == ["step", "copy"] * steps


def _bench_record(gpu):
    record = json.loads((FIXTURES / "record_bench.json").read_text())
    record["host"]["gpu"] = gpu
    return record


def test_reports_say_the_rates_count_batches_copied_to_the_gpu():
    for gpu, said in (("NVIDIA H200", True), (None, False)):
        record = _bench_record(gpu)
        console = Console(width=200, record=True)
        render_bench(record, console)
        text = console.export_text()
        assert ("each batch copied to the GPU (NVIDIA H200)" in text) is said
        markdown = MarkdownRenderer().render(record)
        assert ("each batch was copied to the GPU (NVIDIA H200)" in markdown) is said
