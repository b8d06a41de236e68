"""The code-change probes (NOTE [applied code changes]) on small inputs, in this process."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import vision_changes

from stallscope.changes.anatomy import NotApplicable, examine
from stallscope.changes.base import batches
from stallscope.changes.batch_augment import BatchAugmentation
from stallscope.changes.integer_transfer import IntegerTransfer
from stallscope.changes.prefix_cache import PrefixCache
from stallscope.changes.reduced_decode import ReducedDecode, psnr
from stallscope.target import load_target


@pytest.fixture(scope="module")
def jpegs():
    """The look-alike with 4 images of 768×576 (decode, random crop, flip, jitter, normalise)."""
    pipeline = load_target("tests/pipelines/vision_changes.py:small_pipeline")
    pipeline.dataset = vision_changes.dataset(4)
    pipeline.batch_size = 2
    return pipeline


# -- finding the deterministic prefix -----------------------------------------------------------


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Halve:  # deterministic, and named like nothing random
    def __call__(self, x):
        return x[::2, ::2].copy()


class Offset:  # random, but its name does not say so: only running it twice tells
    def __call__(self, x):
        return x + np.float32(random.random())


class Scale:
    def __call__(self, x):
        return x * np.float32(2)


class ArrayDataset:
    def __init__(self, transform):
        self.data = [np.full((8, 8), i, np.float32) for i in range(6)]
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.transform(self.data[index]), index


def test_prefix_ends_at_the_first_stage_that_differs_between_seeds():
    anatomy = examine(ArrayDataset(Compose([Halve(), Scale(), Offset(), Scale()])))
    assert anatomy.random == [False, False, True, False]
    assert anatomy.first_random == 2
    assert anatomy.item_slot == (0,)


def test_without_a_compose_no_change_applies():
    dataset = ArrayDataset(None)
    dataset.transform = None
    with pytest.raises(NotApplicable, match="composed transform pipeline"):
        examine(dataset)


def test_cache_serves_the_second_pass_without_decoding(jpegs):
    anatomy = examine(jpegs.dataset)
    assert anatomy.first_random == 0  # RandomResizedCrop comes first: the prefix is read + decode
    change = PrefixCache()
    assert change.applies(anatomy, jpegs) is None
    applied = change.apply(anatomy, jpegs)
    try:
        first = batches(applied.dataset, jpegs, count=2)
        decodes = vision_changes.decode_calls
        second = batches(applied.dataset, jpegs, count=2)
        assert vision_changes.decode_calls == decodes  # every item came from the cache
        theirs = batches(jpegs.dataset, jpegs, count=2)
        for ours in (first, second):
            for a, b in zip(ours, theirs):
                assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        side = change.side_effect(anatomy, jpegs, applied)
        assert side["alters_output"] is False
        assert side["items_cached"] == 4 and side["bytes_per_item"] > 768 * 576 * 3
    finally:
        applied.cleanup()


def test_reduced_decode_measures_psnr_on_the_same_crops(jpegs):
    anatomy = examine(jpegs.dataset)
    change = ReducedDecode()
    assert change.applies(anatomy, jpegs) is None
    assert change.factor == 2  # 576 / 2 = 288 >= 224, 576 / 4 = 144 < 224
    applied = change.apply(anatomy, jpegs)
    side = change.side_effect(anatomy, jpegs, applied)
    assert side["alters_output"] is True
    assert 25.0 < side["psnr_db"] < 80.0 and side["psnr_worst_db"] <= side["psnr_db"]
    out = batches(applied.dataset, jpegs, count=1)[0]
    assert tuple(out[0].shape) == (2, 3, 224, 224)


def test_reduced_decode_does_not_apply_below_a_2x_shrink():
    pipeline = load_target("tests/pipelines/vision_changes.py:small_pipeline")
    pipeline.dataset = vision_changes.JpegDataset(0, transform=vision_changes.train_transforms())
    pipeline.dataset.blobs = [vision_changes.paint(i, 320, 260) for i in range(3)]
    pipeline.dataset.labels = [0, 1, 2]
    anatomy = examine(pipeline.dataset)
    why = ReducedDecode().applies(anatomy, pipeline)
    assert why is not None and "less than 2×" in why


def test_psnr():
    a = np.zeros((4, 4), np.uint8)
    assert psnr(a, a) == float("inf")
    assert psnr(a, a + 1) == pytest.approx(48.13, abs=0.01)


def test_integer_transfer_gives_equal_batches_after_main_side_normalise(jpegs):
    anatomy = examine(jpegs.dataset)
    change = IntegerTransfer()
    assert change.applies(anatomy, jpegs) is None
    applied = change.apply(anatomy, jpegs)
    raw = batches(applied.dataset, jpegs, count=2)
    assert raw[0][0].dtype == torch.uint8 and tuple(raw[0][0].shape) == (2, 3, 224, 224)
    ours = [applied.main_step(b) for b in raw]
    theirs = batches(jpegs.dataset, jpegs, count=2)
    for a, b in zip(ours, theirs):
        assert a[0].dtype == torch.float32
        assert torch.max(torch.abs(a[0] - b[0])).item() < 1e-4
    side = change.side_effect(anatomy, jpegs, applied)
    assert side["alters_output"] is False
    assert side["bytes_per_batch"]["before"] == 4 * side["bytes_per_batch"]["after"]


def test_batch_augmentation_moves_the_tensor_stages(jpegs):
    anatomy = examine(jpegs.dataset)
    change = BatchAugmentation()
    assert change.applies(anatomy, jpegs) is None
    assert anatomy.names[change.start :] == ["Normalize"]
    applied = change.apply(anatomy, jpegs)
    side = change.side_effect(anatomy, jpegs, applied)
    assert side["moved"] == ["Normalize"] and side["random_per_batch"] == []
    assert side["alters_output"] is False


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
@pytest.mark.parametrize("change", [PrefixCache, ReducedDecode, IntegerTransfer, BatchAugmentation])
def test_every_diff_is_verified_and_applies_to_the_file(jpegs, change, tmp_path):
    anatomy = examine(jpegs.dataset)
    probe = change()
    assert probe.applies(anatomy, jpegs) is None
    patch = probe.patch(anatomy, jpegs)
    assert patch.verified, patch.reason
    assert patch.diff and patch.diff.startswith("--- ")
    (tmp_path / "change.diff").write_text(patch.diff)
    done = subprocess.run(
        ["patch", "--dry-run", "-p0", "-i", str(tmp_path / "change.diff")],
        cwd=Path.cwd(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_list_is_found_with_qualified_names_and_comments():
    import types

    from stallscope.changes.source import SourceFile, block_end, constructor_block, expression_of

    text = (
        "def make():\n    return T.Compose([\n        T.RandomCrop(224),\n        # why\n"
        "        T.ToTensor(),\n        T.Normalize(MEAN, STD),  # ImageNet\n    ])\n"
    )
    source = SourceFile(Path("x.py"), types.ModuleType("x"), text)
    found = constructor_block([source], ["ToTensor", "Normalize"])
    assert found is not None and found[1] == 4
    assert block_end(source.lines, 4, "Normalize") == 5
    assert expression_of(source.lines[5]) == "T.Normalize(MEAN, STD)"
    assert constructor_block([source], ["Normalize", "ToTensor"]) is None


class FolderLike:
    """Deterministic stages (Halve, Scale) before the first random one: the cache keeps
    their output."""

    def __init__(self, transform):
        self.data = [np.full((8, 8), i, np.float32) for i in range(8)]
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        image = self.data[index].copy()
        image = self.transform(image)
        return image, index


def test_the_cache_keeps_the_deterministic_stages_and_its_diff_runs_the_rest():
    pipeline = load_target("tests/pipelines/vision_changes.py:small_pipeline")
    pipeline.dataset = FolderLike(Compose([Halve(), Scale(), Offset(), Scale()]))
    pipeline.batch_size = 2
    anatomy = examine(pipeline.dataset)
    change = PrefixCache()
    assert change.applies(anatomy, pipeline) is None
    assert change.prefix_label(anatomy) == "read + decode + Halve + Scale"
    applied = change.apply(anatomy, pipeline)
    try:
        batches(applied.dataset, pipeline, count=2)
        cached, _ = applied.notes["cache"].get(0)
        assert cached.shape == (4, 4) and cached[0, 0] == 0.0  # halved and scaled, before Offset
        patch = change.patch(anatomy, pipeline)
        assert patch.verified, patch.reason
        assert (
            "_PREFIX_CACHE.put(index, _run_stages(self.transform.transforms[:2], image))"
            in patch.diff
        )
        assert "image = _run_stages(self.transform.transforms[2:], image)" in patch.diff
    finally:
        applied.cleanup()


def test_a_diff_outside_the_working_folder_names_the_file_in_its_own_folder(tmp_path, monkeypatch):
    from stallscope.changes.source import apply_command, display_path, unified_diff

    inside = tmp_path / "pkg" / "data.py"
    inside.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    assert display_path(inside) == (".", "pkg/data.py")
    assert apply_command(inside) == "patch -p0 < change.diff"
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert display_path(inside) == (str(inside.parent), "data.py")
    assert apply_command(inside) == f"patch -p0 -d {inside.parent} < change.diff"
    assert unified_diff(inside, "a\n", "b\n").startswith("--- data.py\n+++ data.py\n")


def test_speedup_interval_from_paired_rounds():
    import math

    from stallscope.changes.race import Entrant, speedup, speedup_interval

    pick = Entrant("pick", None, rates=[100.0, 80.0, 120.0, math.nan])
    change = Entrant("c", None, rates=[200.0, 170.0, 230.0, 250.0])
    low, high = speedup_interval(change, pick)
    assert low < speedup(change, pick) < high  # the rounds pair up: ratios 2.0, 2.125, 1.917
    assert 1.5 < low and high < 2.6
    assert (
        speedup_interval(Entrant("c", None, rates=[200.0]), Entrant("pick", None, [100.0])) is None
    )


def test_a_factory_built_loader_says_why_a_changed_dataset_cannot_go_in():
    from stallscope.changes.probe import _wrappable

    factory = load_target("tests/pipelines/real_loader_kinds.py:stateful_loader")
    with pytest.raises(NotApplicable, match="trials call the factory, which builds its own"):
        _wrappable(factory)
    graph = load_target("tests/pipelines/real_loader_kinds.py:nodes_fixed")
    with pytest.raises(NotApplicable, match="no Dataset stallscope can wrap"):
        _wrappable(graph)


def test_a_change_counts_only_the_rounds_it_paired_with_the_pick():
    # Round 1: the change's windows delivered nothing; round 2: the pick's. Neither round pairs
    # them: no speed-up, and no round is claimed for one.
    import math
    from types import SimpleNamespace

    from stallscope.changes.probe import _entry
    from stallscope.changes.race import Entrant

    pick = Entrant("pick", None, rates=[100.0, math.nan, 100.0])
    change = Entrant("c", None, rates=[math.nan, 150.0, 120.0])
    prepared = SimpleNamespace(
        change=SimpleNamespace(id="c", title="C"),
        patch=SimpleNamespace(diff="", apply=None, description="", verified=True, reason=None),
        side_effect={"summary": "none"},
        entrant=change,
    )
    entry = _entry(prepared, pick)
    assert entry["rounds"] == 1 and entry["speedup"] == 1.2
    change.rates = [math.nan, 150.0]
    pick.rates = [100.0, math.nan]
    entry = _entry(prepared, pick)
    assert entry["rounds"] == 0 and entry["speedup"] is None
