"""Read/decode found automatically in Pillow and NumPy calls; cold vs warm page cache."""

from __future__ import annotations

import numpy as np
import pytest
import stages_shapes as sh
import torch
from PIL import Image, ImageFile

import stallscope as ss
from stallscope.breakdown.storage import drop_from_page_cache, measure_storage_split
from stallscope.errors import UsageError
from stallscope.target import load_target


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    return sh.write_jpegs(tmp_path_factory.mktemp("jpegs"), count=12)


@pytest.mark.parametrize("by_path", [True, False], ids=["Image.open(path)", "Image.open(file)"])
def test_pillow_read_and_decode_are_separated_in_process(jpegs, by_path):
    original_open, original_load = Image.open, ImageFile.ImageFile.load
    dataset = sh.PillowFolder(jpegs, transform=sh.Compose([sh.ToSmall()]), by_path=by_path)
    result = ss.stages(
        {"dataset": dataset, "batch_size": 4},
        num_workers=0,
        samples=8,
        hotspots=0,
        differential=False,
    )
    names = {s.name: s for s in result.stages}
    assert names["read"].ms_per_sample > 0 and names["decode"].ms_per_sample > 0
    assert names["ToSmall"].ms_per_sample > 0
    assert not result.notes
    # the patches are gone afterwards
    assert Image.open is original_open and ImageFile.ImageFile.load is original_load


def test_pillow_detection_in_a_worker_and_numpy_load_counts_as_read(tmp_path, jpegs):
    paths = []
    for index in range(8):
        path = tmp_path / f"a{index}.npy"
        np.save(path, np.full((64,), index, dtype=np.float32))
        paths.append(path)
    result = ss.stages(
        {"dataset": sh.NumpyFiles(paths), "batch_size": 4},
        num_workers=1,
        samples=8,
        hotspots=0,
        start_method="fork",
    )
    kinds = {s.kind for s in result.stages}
    assert "read" in kinds and "decode" not in kinds
    assert result.run.num_workers == 1 and result.run.samples >= 8
    assert any("no transform pipeline" in note for note in result.notes)


def test_nothing_detected_leaves_it_in_other_with_a_note():
    dataset = sh.TorchvisionLikeDataset(sh.Compose([sh.Normalize()]))
    result = ss.stages({"dataset": dataset, "batch_size": 4}, num_workers=0, samples=8, hotspots=0)
    assert [s.name for s in result.stages][:2] == ["Normalize", "other (__getitem__)"]
    assert any("read and decode were not seen" in note for note in result.notes)


def test_a_pipeline_that_fails_without_its_random_transform_keeps_its_stage_table():
    # The packing step reads the key the random flip sets: the run without the flip fails, which
    # is the differential's limit, not the pipeline's; its stage time stands.
    result = ss.stages(
        {"dataset": sh.DictPipelineDataset(), "batch_size": 4}, num_workers=0, samples=8, hotspots=0
    )
    assert {"pipeline.RandomFlipMarked", "pipeline.PackMarked"} <= {s.name for s in result.stages}
    overhead = result.augmentation_overhead
    assert overhead is not None and overhead.transforms == ["pipeline.RandomFlipMarked"]
    assert overhead.differential_ms_per_sample is None and overhead.samples == 0
    assert any(
        "the run without pipeline.RandomFlipMarked was not measured" in note
        and "KeyError: 'flip'" in note
        for note in result.notes
    ), result.notes


def test_iterable_dataset_stages(tmp_path):
    dataset = sh.StreamDataset(count=160, transform=sh.Compose([sh.Normalize()]))
    result = ss.stages(
        {"dataset": dataset, "batch_size": 4},
        num_workers=1,
        samples=64,  # one stall of tens of ms (preemption) moves a 16-sample mean by ~2 ms
        hotspots=2,
        start_method="fork",
    )
    # a 2 ms sleep per item: sleeps overshoot on a loaded machine but never return early, while a
    # per-batch/per-sample mix-up would be off by the batch size (4x). The sleep the stream's
    # generator calls is broken out of "other" as a row of its own.
    assert 1.98 <= result.inclusive_ms("other (__getitem__)") < 4.0
    assert 1.98 <= result.stage("time.sleep()").ms_per_sample < 4.0
    assert result.stage("time.sleep()").parent == "other (__getitem__)"
    assert result.hotspots and result.hotspots[0].function == "<built-in method time.sleep>"


def test_drop_cache_splits_fetch_from_preparation(jpegs):
    assert drop_from_page_cache([str(p) for p in jpegs]) == len(jpegs)
    pipeline = load_target({"dataset": sh.PillowFolder(jpegs), "batch_size": 4})
    split = measure_storage_split(pipeline, samples=12)
    assert split is not None
    assert split.files == len(jpegs) and split.bytes == sum(p.stat().st_size for p in jpegs)
    assert split.cold_ms_per_sample > 0 and split.warm_ms_per_sample > 0
    assert split.fetch_ms_per_sample == pytest.approx(
        max(0.0, split.cold_ms_per_sample - split.warm_ms_per_sample)
    )
    assert 0.0 <= split.fetch_share < 1.0


def test_a_dataset_that_forwards_its_attributes_is_copied_and_its_transforms_timed():
    # copy.copy of it recurses in __getattr__ (deep enough in C to crash the interpreter under
    # some stacks): stallscope copies such an object by its __dict__ instead.
    dataset = sh.Delegating([torch.zeros(2)] * 8, sh.Compose([sh.RandomCrop()]))
    result = ss.stages({"dataset": dataset, "batch_size": 4}, num_workers=0, samples=8, hotspots=0)
    assert "RandomCrop" in [s.name for s in result.stages]
    assert not any("were not timed one by one" in note for note in result.notes)


class Uncopyable(torch.utils.data.Dataset):
    def __init__(self, transform) -> None:
        self.transform = transform

    def __copy__(self):
        raise TypeError("this dataset holds a handle that cannot be copied")

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return self.transform(torch.zeros(2))


def test_a_dataset_that_cannot_be_copied_is_timed_as_a_whole_with_a_note():
    dataset = Uncopyable(sh.Compose([sh.RandomCrop()]))
    result = ss.stages({"dataset": dataset, "batch_size": 4}, num_workers=0, samples=8, hotspots=0)
    assert "RandomCrop" not in [s.name for s in result.stages]
    assert any("were not timed one by one" in note for note in result.notes)
    assert result.augmentation_overhead is None


def test_batched_fetch_counts_every_sample():
    result = ss.stages(
        {"dataset": sh.BatchedFetch(length=96), "batch_size": 4},
        num_workers=1,
        samples=64,  # one stall of tens of ms (preemption) moves a 16-sample mean by ~2 ms
        start_method="fork",
        hotspots=0,
    )
    assert result.run.samples == 64 and result.run.batches == 16
    # 4 ms per batch of 4 samples; overshoot only adds, a per-batch attribution would read 4 ms
    assert 0.99 <= result.inclusive_ms("other (__getitem__)") < 2.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_copies_to_cuda_are_only_timed_with_cuda():
    from stallscope.breakdown.workers import _cuda_device

    assert _cuda_device("auto") is None and _cuda_device("cpu") is None
    with pytest.raises(UsageError, match="CUDA is not available"):
        _cuda_device("cuda")
