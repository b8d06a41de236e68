"""The user's own API first (NOTE [loader kinds]): a TARGET factory that takes a knob is what
trials call and what the printed code calls, whatever it builds; an IterableDataset that holds a
DataLoader yields that loader's batches and is not re-batched; the stage probe's stand-in for the
user's dataset answers to the library's own class checks and methods."""

from __future__ import annotations

import pickle
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from stallscope.breakdown.instrumented import InstrumentedDataset, InstrumentedIterableDataset
from stallscope.config import LoaderConfig
from stallscope.pipeline.preflight import preflight
from stallscope.render.loader_code import render_python
from stallscope.render.loader_snippet import snippet_for_record
from stallscope.target import load_target


class Squares(Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3,), float(index * index))


class ShardLoader(DataLoader):
    """Required keyword-only arguments, as training frameworks' loaders have."""

    def __init__(self, *, rank: int, world_size: int, batch_size: int, num_workers: int = 0):
        self.rank, self.world_size = rank, world_size
        super().__init__(Squares(), batch_size=batch_size, num_workers=num_workers)


calls: list[dict[str, Any]] = []


def make_shard_loader(num_workers: int | None = None) -> ShardLoader:
    calls.append({"num_workers": num_workers})
    return ShardLoader(rank=0, world_size=1, batch_size=4, num_workers=num_workers or 0)


class Batches(IterableDataset):
    """Yields ready batches of 5 (as webdataset's ``.batched()`` does inside the workers)."""

    def __iter__(self):
        for start in range(0, 20, 5):
            yield torch.arange(start, start + 5).float().unsqueeze(1).repeat(1, 2)


class LoaderPipeline(IterableDataset):
    """An IterableDataset that holds a DataLoader and iterates it (webdataset's WebLoader)."""

    def __init__(self, loader: DataLoader) -> None:
        self.pipeline = [loader]

    def __iter__(self):
        return iter(self.pipeline[0])


def make_batch_pipeline(num_workers: int = 0) -> LoaderPipeline:
    return LoaderPipeline(DataLoader(Batches(), batch_size=None, num_workers=num_workers))


def test_a_factory_taking_a_knob_is_what_trials_call_for_a_subclass():
    pipeline = load_target(make_shard_loader)
    assert pipeline.kind.name == "factory"
    assert pipeline.kind.knobs == ("num_workers",)
    assert pipeline.baseline.num_workers == 0  # None: the product's own value
    calls.clear()
    trial = pipeline.kind.build(pipeline.baseline.replace(num_workers=2))
    assert calls == [{"num_workers": 2}]
    assert isinstance(trial, ShardLoader) and trial.num_workers == 2
    pipeline.kind.build(pipeline.baseline)
    assert calls[-1] == {"num_workers": None}  # the baseline calls it as the target did


def test_the_printed_code_calls_the_factory_and_never_sets_attributes():
    pipeline = load_target(make_shard_loader)
    assert pipeline.call is not None and pipeline.call.arguments  # the subclass's own call
    record = {
        "loader": pipeline.call.to_dict(),
        "loader_kind": pipeline.kind.to_dict(),
        "baseline": {"config": pipeline.baseline.to_dict()},
        "best": {"config": pipeline.baseline.replace(num_workers=2).to_dict()},
    }
    snippet = snippet_for_record(record)
    assert snippet is not None and snippet.form == "factory"
    code = render_python(snippet)
    assert "make_shard_loader(\n    num_workers=2,  # was 0\n)" in code
    assert "ShardLoader(" not in code and "prefetch_factor" not in code
    assert snippet_for_record(record, form="attributes") is None
    record["best"] = {"config": pipeline.baseline.to_dict()}
    unchanged = render_python(snippet_for_record(record))
    assert "loader = make_shard_loader()\n" in unchanged


def test_an_iterable_dataset_holding_a_dataloader_is_a_wrapper_not_a_dataset():
    pipeline = load_target(make_batch_pipeline)
    assert pipeline.kind.name == "factory"
    inner = pipeline.kind.inner
    assert inner is not None and inner.name == "wrapped-dataloader"
    # batch_size=None: items are batches, converted and never collated again.
    from torch.utils.data._utils.collate import default_convert

    assert pipeline.collate is default_convert
    pre = preflight(pipeline)
    assert pre.batch_structure == "Tensor[5,2] float32"  # the loader's own batch, not re-batched


def test_the_stage_probes_stand_in_passes_the_libraries_class_checks_and_pickles():
    stream = Batches()
    stream.reset_state = lambda: "reset"  # a library's own method on the dataset it holds
    wrapped = InstrumentedIterableDataset(stream, callees=False)
    assert isinstance(wrapped, Batches) and isinstance(wrapped, IterableDataset)
    assert wrapped.reset_state() == "reset"
    again = pickle.loads(pickle.dumps(InstrumentedIterableDataset(Batches(), callees=False)))
    assert type(again) is InstrumentedIterableDataset and isinstance(again, Batches)
    assert len(list(again)) == 4
    mapped = InstrumentedDataset(Squares(), callees=False)
    assert isinstance(mapped, Squares) and len(mapped) == 40
    assert float(pickle.loads(pickle.dumps(mapped))[3][0]) == 9.0


class StrictLoader(DataLoader):
    """A library's loader that takes another path for a dataset not exactly of its own type."""

    def __iter__(self):
        if type(self.dataset) is not Squares:
            raise TypeError("expected the library's own dataset")
        return super().__iter__()


def strict_loader() -> StrictLoader:
    return StrictLoader(Squares(), batch_size=4)


def test_a_stand_in_the_loader_refuses_is_not_measured_and_says_why():
    import pytest

    from stallscope.breakdown.probe import stages
    from stallscope.errors import NotMeasured, PipelineError

    with pytest.raises(NotMeasured, match="instrumented copy") as caught:
        stages(strict_loader, num_workers=0, hotspots=0, differential=False, device=None)
    assert isinstance(caught.value, PipelineError)  # `stallscope stages` alone: exit 2
    # The same probe on a loader that takes the stand-in measures as before.
    result = stages(
        lambda: DataLoader(Squares(), batch_size=4),
        num_workers=0,
        samples=8,
        hotspots=0,
        differential=False,
        device=None,
    )
    assert result.stages


class EngineLoader(DataLoader):
    """Holds DataLoader attributes but makes its batches elsewhere (an engine of its own)."""

    def __iter__(self):
        for start in range(0, 12, 4):
            yield torch.arange(start, start + 4)


def engine_loader() -> EngineLoader:
    return EngineLoader(Squares(), batch_size=4)


def test_an_attribute_the_object_never_reads_is_not_printed_as_a_change():
    from stallscope.pipeline.verify import run_snippet

    here = "from test_pipeline_factory_first import engine_loader, make_shard_loader\n"
    knobs = "loader.num_workers = 2\nloader.prefetch_factor = 2\n"
    config = LoaderConfig(num_workers=2, batch_size=4)
    engine = run_snippet(
        here + "loader = engine_loader()\n" + knobs, reference=None, config=config, attributes=True
    )
    assert not engine.ok and "not seen to be read" in (engine.reason or "")
    read = run_snippet(
        here + "loader = make_shard_loader()\n" + knobs,
        reference=None,
        config=config,
        attributes=True,
    )
    assert read.ok, read.reason


class ShortStream:
    """Three batches of 4 an epoch, as a stream with a shard per worker ends after a few."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self.epochs = 0

    def __iter__(self):
        self.epochs += 1
        for i in range(3):
            yield torch.full((4, 2), float(i))


def short_stream(threads: int = 1) -> ShortStream:
    return ShortStream(threads)


def test_a_factory_stream_that_ends_is_re_iterated_with_each_restart_off_the_window():
    from stallscope.pipeline.loaders import EpochCycle
    from stallscope.throughput.measure import measure

    cycle = EpochCycle(ShortStream())
    firsts = [cycle.fresh for _ in range(7) if next(cycle) is not None]
    assert firsts == [False, False, False, True, False, False, True]
    assert cycle.epochs == 2 and cycle.restart_s >= 0.0

    pipeline = load_target(short_stream)
    assert pipeline.kind.name == "factory"
    result = measure(pipeline, pipeline.baseline, min_window_s=0.05, min_batches=12)
    assert not result.exhausted  # one epoch of three batches is not a steady state
    # Each epoch's first batch is start-up: neither its wait nor its samples are in the window.
    assert result.batches >= 12 and result.samples == 4 * result.batches
    # The same for a stream the factory builds over an IterableDataset (webdataset's shape).
    stream = load_target(make_batch_pipeline)
    result = measure(stream, stream.baseline, min_window_s=0.05, min_batches=12)
    assert not result.exhausted and result.samples == 5 * result.batches


def test_a_snippet_whose_loader_starts_a_pool_is_run_and_its_pool_terminated():
    # Its pool's processes would otherwise be killed first (no_orphans), leaving the lock its
    # terminate must take held by a dead worker: the collector's finaliser then hung `bench`.
    import gc

    from stallscope.pipeline.verify import run_snippet

    code = (
        "from declared_stages import ProcessPoolLoader\n\nloader = ProcessPoolLoader(batches=3)\n"
    )
    run = run_snippet(code, reference=None)
    assert run.ok, run.reason
    gc.collect()  # the pool's finaliser runs here: it returns at once, the pool already ended


def test_a_snippet_whose_loader_never_gives_a_batch_is_stopped_at_its_timeout():
    # A DataLoader built without timeout= whose forked workers hang (NOTE [fork after use]) hung
    # doctor in the snippet's run. In its own interpreter: the timer is SIGALRM, which the suite's
    # per-test timeout holds in this one.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        from stallscope.pipeline.verify import run_snippet
        code = (
            "import threading\\n"
            "class Stuck:\\n"
            "    def __iter__(self):\\n"
            "        threading.Event().wait()\\n"
            "        yield 1\\n"
            "loader = Stuck()\\n"
        )
        run = run_snippet(code, reference=None, timeout=1.0)
        print(run.ok, run.reason)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False the loader it builds gave no two batches in 1 s"
