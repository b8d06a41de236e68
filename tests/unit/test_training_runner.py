"""The profile probe: calling train_step, devices, honest timing with a fake device, accuracy."""

from __future__ import annotations

import pytest
import torch
from profile_synthetic import input_bound
from torch import nn

from stallscope.analysis.training import profile_advice, profile_recommendations, verdict_for
from stallscope.config import LoaderConfig
from stallscope.errors import PipelineError, UsageError
from stallscope.target import load_target
from stallscope.training import MIN_WARMUP
from stallscope.training.runner import (
    RankShardSampler,
    default_warmup,
    resolve_device,
    resolve_profile_sync,
    run_profile,
    step_caller,
    train_step_style,
)

# -- train_step signatures -------------------------------------------------------------------


def two(model, batch): ...
def one(batch): ...
def with_default(batch, scale=1.0): ...
def model_first_default(model, batch=None): ...
def varargs(*args): ...
def three(model, batch, optimizer): ...
def none(): ...


class Step:
    def __call__(self, model, batch): ...


@pytest.mark.parametrize(
    ("fn", "has_model", "style"),
    [
        (two, True, "model, batch"),
        (one, True, "batch"),
        (with_default, True, "batch"),
        (model_first_default, True, "model, batch"),
        (varargs, True, "model, batch"),
        (varargs, False, "batch"),
        (Step(), True, "model, batch"),
        (lambda b: None, False, "batch"),
    ],
)
def test_train_step_style_by_signature(fn, has_model, style):
    assert train_step_style(fn, has_model) == style


@pytest.mark.parametrize("fn", [three, none])
def test_train_step_with_a_wrong_signature_is_a_usage_error(fn):
    with pytest.raises(UsageError, match="train_step"):
        train_step_style(fn, True)


def test_step_caller_needs_a_model_for_two_arguments():
    with pytest.raises(UsageError, match="no 'model'"):
        step_caller(two, None)
    with pytest.raises(UsageError, match="not a callable"):
        step_caller(42, None)
    seen = []
    call, style = step_caller(lambda model, batch: seen.append((model, batch)), "M")
    call("B")
    assert seen == [("M", "B")] and style == "train_step(model, batch)"


# -- devices ---------------------------------------------------------------------------------


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(UsageError, match="no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(UsageError):
        resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(None) == "cuda" and resolve_device("cuda:1") == "cuda:1"


def test_profile_sync_is_on_for_cuda_unless_refused():
    assert resolve_profile_sync(None, "cpu") is None
    assert resolve_profile_sync(True, "cpu") is None
    assert resolve_profile_sync(None, "cuda") == "cuda"
    assert resolve_profile_sync(False, "cuda:0") is None


def test_rank_shard_sampler_interleaves_ranks():
    assert list(RankShardSampler(5, 4, rank=1, world_size=2)) == [1, 3, 0, 2]
    assert len(RankShardSampler(5, 4)) == 4


# -- the probe -------------------------------------------------------------------------------


def test_known_costs_give_the_true_stall_fraction():
    # 4 items x 3 ms of data per batch (single process) vs 4 ms of compute, on the fake clock.
    profile = _clocked_profile(item_s=0.003, compute_s=0.004, steps=25, warmup=2)
    assert profile["stall_fraction"] == pytest.approx(12 / (12 + 4), abs=1e-4)
    assert verdict_for(profile["stall_fraction"]) == "input-bound"
    assert "verdict" not in profile  # the probe records; analysis judges (judged_profile)
    assert profile["steps"] == 25 and profile["total_steps"] == 27
    assert profile["train_step_call"] == "train_step(model, batch)"
    # Free data: the replayed steps take their 4 ms of compute alone.
    assert profile["what_if_speedup"] == pytest.approx(16 / 4, rel=1e-3)
    # Measurements only; the advice is analysis, over the record (its TARGET) or the profile.
    assert "recommendations" not in profile and "advice" not in profile
    recs = profile_recommendations(dict(profile, target="t.py:fn"))
    assert recs[0]["id"] == "profile-input-bound"
    assert recs[0]["handoff"] == "stallscope tune t.py:fn"
    assert "stallscope tune TARGET" in (profile_advice(profile) or "")


@pytest.mark.parametrize(
    ("workers", "prefetch", "expected"),
    [(0, None, MIN_WARMUP), (1, 2, MIN_WARMUP), (2, 2, 7), (4, 4, 21), (8, 2, 25)],
)
def test_default_warmup_drains_the_prefetch_buffer_and_a_round_per_worker(
    workers, prefetch, expected
):
    config = LoaderConfig(batch_size=4, num_workers=workers, prefetch_factor=prefetch)
    warmup = default_warmup(config)
    assert warmup == expected
    assert warmup >= workers * (prefetch or 0) + workers  # issue 10 item 10


def test_profile_warms_up_for_the_loaders_prefetch_by_default():
    config = LoaderConfig(
        batch_size=4, num_workers=2, prefetch_factor=3, multiprocessing_context="fork"
    )
    profile = run_profile(load_target(input_bound), steps=4, config=config)
    assert profile["warmup_steps"] == 2 * 3 + 2 + 1
    assert profile["total_steps"] == profile["warmup_steps"] + 4 and profile["steps"] == 4


def test_compute_dominated_target_is_compute_bound():
    # Fetching is free on the fake clock; each step computes for 40 ms.
    profile = _clocked_profile(item_s=0.0, compute_s=0.040, steps=12, warmup=1)
    assert profile["stall_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert verdict_for(profile["stall_fraction"]) == "compute-bound"
    assert profile["what_if_speedup"] == pytest.approx(1.0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class ClockedDataset(torch.utils.data.Dataset):
    """Items of shape (4,), each costing ``cost_s`` of the fake clock to fetch."""

    def __init__(self, clock: FakeClock, cost_s: float = 0.001) -> None:
        self.clock = clock
        self.cost_s = cost_s

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        self.clock.t += self.cost_s
        return torch.zeros(4)


class ClockedStep:
    """A real model call that takes ``cost_s`` of the fake clock: known compute."""

    def __init__(self, clock: FakeClock, cost_s: float) -> None:
        self.clock = clock
        self.cost_s = cost_s

    def __call__(self, model: nn.Module, batch: torch.Tensor) -> None:
        with torch.no_grad():
            model(batch)
        self.clock.t += self.cost_s


def _clocked_profile(*, item_s: float, compute_s: float, steps: int, warmup: int) -> dict:
    """``run_profile`` in one process on the fake clock: batches of 4 items."""
    clock = FakeClock()
    target = {
        "dataset": ClockedDataset(clock, item_s),
        "model": nn.Linear(4, 2),
        "train_step": ClockedStep(clock, compute_s),
        "batch_size": 4,
    }
    return run_profile(
        load_target(target),
        steps=steps,
        warmup=warmup,
        config=LoaderConfig(batch_size=4),
        watch_options={"clock": clock},
    )


class FakeDevice:
    """Asynchronous 'device' on the fake clock: train_step queues 50 ms of work and returns;
    synchronize() waits for it."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.busy_until = 0.0

    def launch(self) -> None:
        self.busy_until = max(self.busy_until, self.clock.t) + 0.05

    def synchronize(self) -> None:
        self.clock.t = max(self.clock.t, self.busy_until)


def _device_profile(synced: bool) -> dict:
    clock = FakeClock()
    device = FakeDevice(clock)
    target = {
        "dataset": ClockedDataset(clock),
        "model": nn.Linear(4, 2),
        "train_step": lambda m, b: device.launch(),
        "batch_size": 2,
    }
    return run_profile(
        load_target(target),
        steps=10,
        warmup=1,
        config=LoaderConfig(batch_size=2),
        sync=device.synchronize if synced else None,
        watch_options={"clock": clock},
        free_data=False,
    )


def test_sync_makes_device_time_count_as_compute():
    unsynced, synced = _device_profile(synced=False), _device_profile(synced=True)
    # Without a synchronise the queued device work is invisible: the loop looks input-bound.
    assert unsynced["data_ms"]["mean"] == pytest.approx(2.0)
    assert unsynced["compute_ms"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert verdict_for(unsynced["stall_fraction"]) == "input-bound"
    # With it, each step waits for its 50 ms: 2 ms of loading in 52 is compute-bound.
    assert synced["data_ms"]["mean"] == pytest.approx(2.0)
    assert synced["compute_ms"]["mean"] == pytest.approx(50.0)
    assert synced["stall_fraction"] == pytest.approx(2 / 52, abs=1e-4)  # rounded in the record
    assert verdict_for(synced["stall_fraction"]) == "compute-bound"
    assert synced["sync"]["calls"] >= 10


def test_train_step_errors_name_the_step():
    from profile_synthetic import failing_step

    with pytest.raises(PipelineError, match=r"train_step raised ValueError: loss is NaN at step 0"):
        run_profile(load_target(failing_step), steps=3, warmup=0)


def test_a_target_without_train_step_is_a_usage_error():
    from profile_synthetic import no_train_step

    with pytest.raises(UsageError, match="has no train_step"):
        run_profile(load_target(no_train_step), steps=3)
    with pytest.raises(UsageError, match="--steps"):
        run_profile(load_target(input_bound), steps=0)


def test_batch_only_train_step_and_workers():
    from profile_synthetic import batch_only_step

    profile = run_profile(
        load_target(batch_only_step),
        steps=8,
        warmup=1,
        config=LoaderConfig(batch_size=4, num_workers=1),
    )
    assert profile["train_step_call"] == "train_step(batch)"
    assert (
        profile["total_steps"] == 9
        and profile["steps"] == 8
        and profile["config"]["num_workers"] == 1
    )
    assert profile["epoch_steps"] == 8


def test_iterable_dataset_runs_as_many_epochs_as_needed():
    from torch.utils.data import IterableDataset

    class Five(IterableDataset):
        def __iter__(self):
            return iter(torch.zeros(5, 4))

    seen = []
    target = {
        "dataset": Five(),
        "train_step": lambda batch: seen.append(batch.shape[0]),
        "batch_size": 2,
    }
    # The loop's own steps only (the free-data replay calls train_step again, on its cached
    # batches).
    profile = run_profile(
        load_target(target), steps=5, warmup=0, config=LoaderConfig(batch_size=2), free_data=False
    )
    assert profile["total_steps"] == 5 and profile["epochs"] == 2
    assert seen == [2, 2, 1, 2, 2]
