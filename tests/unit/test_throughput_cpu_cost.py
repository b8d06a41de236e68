"""The CPU cost per sample (throughput/cpu_cost.py) and the main process's receive cost
(measure.py), on datasets of known cost: CPU time, not wall time."""

from __future__ import annotations

from ceiling_costs import burn, sleepy

from stallscope.config import LoaderConfig
from stallscope.target import load_target
from stallscope.throughput.cpu_cost import measure_cpu_cost
from stallscope.throughput.measure import measure
from stallscope.throughput.sweep import main_ms_per_batch


def test_cpu_cost_per_sample_is_the_cpu_each_item_burns():
    cost = measure_cpu_cost(load_target(burn))
    assert cost is not None and cost.window_s >= 1.0 and cost.torch_threads == 1
    # 2 ms of CPU per item, plus collate and loader overhead (a few µs per item); a busy machine
    # stretches the wall time but not the CPU time.
    assert 0.0019 <= cost.cpu_s_per_sample < 0.0030, cost
    assert cost.samples == cost.batches * 8 and cost.usable_cores >= 1


def test_a_sleeping_source_costs_wall_time_not_cpu():
    cost = measure_cpu_cost(load_target(sleepy))
    assert cost is not None
    assert cost.wall_s_per_sample >= 0.005
    assert cost.cpu_s_per_sample < 0.3 * cost.wall_s_per_sample, cost


def test_measure_clocks_the_main_process_receiving_batches_from_workers():
    pipeline = load_target(sleepy)
    m = measure(pipeline, LoaderConfig(num_workers=2, batch_size=8), min_window_s=0.5)
    assert m.main_cpu_s is not None and m.main_cpu_s > 0
    per_batch = main_ms_per_batch([m])
    # Receiving a batch of 8 small tensors costs far less CPU than the 40 ms a worker sleeps for it.
    assert per_batch is not None and 0 < per_batch < 0.5 * m.window_s * 1000 / m.batches
    zero = measure(pipeline, LoaderConfig(num_workers=0, batch_size=8), min_window_s=0.3)
    assert main_ms_per_batch([zero]) is None  # the main process makes the batches: no receive cost
