"""Code changes for datasets that work inline in ``__getitem__`` (NOTE [inline prefix]): the first
random statement found by tracing, and each change's diff applied with ``patch`` and run."""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stallscope.changes.anatomy import NotApplicable, seeded
from stallscope.changes.base import batches
from stallscope.changes.inline import examine_inline
from stallscope.changes.inline_changes import (
    InlineIntegerTransfer,
    InlinePrefixCache,
    InlineReducedDecode,
    equal,
)
from stallscope.target import load_target

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"

# -- which statement draws: found at run time ----------------------------------------------------


class DrawsFromSelfGenerator:
    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.data = [np.full((16, 16), i, np.float32) for i in range(4)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        x = self.data[index]
        x = x * 2
        shift = self.rng.integers(0, 3)  # a Generator held by the dataset
        return np.roll(x, shift), index


class DrawsFromTorch:
    def __init__(self):
        self.data = [torch.full((4, 4), float(i)) for i in range(4)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        x = self.data[index].clone()
        x = x + 1
        if index >= 0:
            x = x + torch.rand(())  # inside an if: the if statement draws
        return x


class CreatesAGenerator:
    def __init__(self):
        self.data = list(range(4))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        value = self.data[index]
        rng = random.Random(index)  # seeded per index: cached, it would replay the same draws
        return value + rng.random()


def _first(anatomy):
    return anatomy.statements[anatomy.first_random].text


def test_a_generator_held_by_the_dataset_is_traced():
    anatomy = examine_inline(DrawsFromSelfGenerator())
    assert _first(anatomy).startswith("shift = self.rng.integers")
    assert "self.rng" in anatomy.random_by
    assert anatomy.live == ["x"]


def test_torch_draws_inside_an_if_count_for_the_if():
    anatomy = examine_inline(DrawsFromTorch())
    assert _first(anatomy) == "if index >= 0:"
    assert "torch" in anatomy.random_by


def test_creating_a_generator_ends_the_prefix():
    anatomy = examine_inline(CreatesAGenerator())
    assert _first(anatomy).startswith("rng = random.Random")


class ReturnsAtOnce:
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.full((2,), float(index))


def test_a_getitem_that_returns_in_its_first_statement_is_not_said_to_draw():
    anatomy = examine_inline(ReturnsAtOnce())
    assert anatomy.random_by is None and not anatomy.prefix
    why = InlinePrefixCache().applies(anatomy, None)
    assert why.startswith("__getitem__ returns in its first statement") and "random" not in why


class ComputesThenReturns:
    """Deterministic statements, no read: the prefix runs up to the return."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        x = np.full((4, 4), index, np.float32)
        x = x[:, ::-1] if index % 2 else x
        return torch.from_numpy(np.ascontiguousarray(x))


def test_a_prefix_without_a_draw_is_said_to_end_at_the_return():
    anatomy = examine_inline(ComputesThenReturns())
    assert anatomy.random_by is None and anatomy.prefix
    why = InlinePrefixCache().applies(anatomy, None)
    assert "runs before the return (line " in why and "random draw" not in why, why


def test_a_library_dataset_is_not_examined():
    from torch.utils.data import TensorDataset

    with pytest.raises(NotApplicable):
        examine_inline(TensorDataset(torch.zeros(4, 2)))


# -- the real pipelines: PIL + NumPy, OpenCV, albumentations --------------------------------------


def _copy(name: str, tmp_path: Path) -> Path:
    """The pipeline file in a folder of its own (the diff is applied to the copy)."""
    target = tmp_path / name
    shutil.copy(PIPELINES / name, target)
    return target


def _load(path: Path, module: str):
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def _apply(diff: str, path: Path) -> None:
    done = subprocess.run(
        ["patch", "-p0", "-d", str(path.parent)], input=diff, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _patched_batches(path: Path, module: str, factory: str, tmp_path: Path, pipeline):
    """Two batches from the patched file, imported as a module of its own, its cache in a
    temporary folder."""
    patched = _load(path, module)
    try:
        if hasattr(patched, "_PREFIX_CACHE"):
            patched._PREFIX_CACHE.folder = str(tmp_path / "cache")
        made = getattr(patched, factory)()
        return [batches(made["dataset"], pipeline) for _ in range(2)]
    finally:
        sys.modules.pop(module, None)


@pytest.fixture
def pil(tmp_path):
    path = _copy("inline_pil.py", tmp_path)
    return path, load_target(f"{path}:small_pipeline")


def test_pil_prefix_ends_at_the_first_numpy_draw(pil):
    _, pipeline = pil
    anatomy = examine_inline(pipeline.dataset)
    assert _first(anatomy).startswith("top = np.random.randint")
    assert anatomy.random_by == "np.random drew"
    assert anatomy.live == ["label", "array"]
    assert "Image.open" in anatomy.prefix_label()


def test_pil_prefix_cache_diff_applies_and_runs(pil, tmp_path):
    path, pipeline = pil
    anatomy = examine_inline(pipeline.dataset)
    change = InlinePrefixCache()
    assert change.applies(anatomy, pipeline) is None
    patch = change.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert "_PREFIX_CACHE.get(index)" in patch.diff
    _apply(patch.diff, path)
    runs = _patched_batches(path, "inline_pil_patched", "small_pipeline", tmp_path, pipeline)
    theirs = batches(pipeline.dataset, pipeline)
    for ours in runs:  # the first run fills the cache, the second reads it
        assert all(equal(a, b) for a, b in zip(ours, theirs))
    assert len(list((tmp_path / "cache").glob("*.pkl"))) == 2 * pipeline.batch_size


def test_pil_cache_in_the_probe_serves_the_users_items(pil):
    _, pipeline = pil
    anatomy = examine_inline(pipeline.dataset)
    change = InlinePrefixCache()
    assert change.applies(anatomy, pipeline) is None
    applied = change.apply(anatomy, pipeline)
    try:
        for _ in range(2):
            with seeded(5):
                ours = applied.dataset[1]
            with seeded(5):
                theirs = pipeline.dataset[1]
            assert equal(ours, theirs)
        side = change.side_effect(anatomy, pipeline, applied)
        assert side["alters_output"] is False
        assert side["items_cached"] >= 1 and side["bytes_per_item"] > 768 * 576 * 3
    finally:
        applied.cleanup()


def test_pil_without_a_resize_reduced_decode_says_why(pil):
    _, pipeline = pil
    why = InlineReducedDecode().applies(examine_inline(pipeline.dataset), pipeline)
    assert why is not None and "no resize follows the decode" in why


def test_pil_resized_reduced_decode_diff_applies_and_runs(tmp_path):
    path = _copy("inline_pil.py", tmp_path)
    pipeline = load_target(f"{path}:resized_pipeline")
    pipeline.dataset.paths = pipeline.dataset.paths[:8]
    pipeline.batch_size = 4
    anatomy = examine_inline(pipeline.dataset)
    change = InlineReducedDecode()
    assert change.applies(anatomy, pipeline) is None
    assert change.factor == 2  # 768×576 → 320×240: 1/2 (384×288) still covers it, 1/4 does not
    side = change.side_effect(anatomy, pipeline, change.apply(anatomy, pipeline))
    assert side["alters_output"] is True and 25.0 < side["psnr_db"] < 80.0
    patch = change.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert 'image.draft("RGB"' in patch.diff
    _apply(patch.diff, path)
    patched = _load(path, "inline_pil_draft")
    try:
        dataset = patched.InlineJpegDataset(pipeline.dataset.paths, resize=(320, 240))
        out = batches(dataset, pipeline)
        assert tuple(out[0][0].shape) == (4, 3, 224, 224)
    finally:
        sys.modules.pop("inline_pil_draft", None)


def test_opencv_prefix_cache_and_reduced_decode_diffs_apply_and_run(tmp_path):
    path = _copy("inline_opencv.py", tmp_path)
    pipeline = load_target(f"{path}:small_pipeline")
    anatomy = examine_inline(pipeline.dataset)
    assert _first(anatomy).startswith("top = random.randint")
    assert "cv2.imread" in anatomy.prefix_label() and "cv2.resize" in anatomy.prefix_label()
    decode = InlineReducedDecode()
    assert decode.applies(anatomy, pipeline) is None and decode.factor == 2
    decode_patch = decode.patch(anatomy, pipeline)
    assert decode_patch.verified, decode_patch.reason
    assert "cv2.IMREAD_REDUCED_COLOR_2" in decode_patch.diff
    cache = InlinePrefixCache()
    assert cache.applies(anatomy, pipeline) is None
    cache_patch = cache.patch(anatomy, pipeline)
    assert cache_patch.verified, cache_patch.reason
    _apply(cache_patch.diff, path)
    runs = _patched_batches(path, "inline_opencv_patched", "small_pipeline", tmp_path, pipeline)
    theirs = batches(pipeline.dataset, pipeline)
    for ours in runs:
        assert all(equal(a, b) for a, b in zip(ours, theirs))


def test_albumentations_prefix_found_by_the_compose_generators(tmp_path):
    pytest.importorskip("albumentations")
    path = _copy("inline_albumentations.py", tmp_path)
    pipeline = load_target(f"{path}:small_pipeline")
    anatomy = examine_inline(pipeline.dataset)
    assert _first(anatomy).startswith('image = self.transform(image=image)["image"]')
    assert "self.transform" in anatomy.random_by and "py_random" in anatomy.random_by
    cache = InlinePrefixCache()
    assert cache.applies(anatomy, pipeline) is None
    # A.Resize (p=1, deterministic) joins the prefix; RandomCrop, the first random one, does not
    assert cache.head is not None and cache.head.names == ["Resize"]
    assert cache.values["image"].shape == (288, 384, 3)
    patch = cache.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert "for transform in self.transform.transforms[:1]:" in patch.diff
    assert '+        image = _compose_tail(self.transform, 1)(image=image)["image"]' in patch.diff
    applied = cache.apply(anatomy, pipeline)
    try:
        assert tuple(batches(applied.dataset, pipeline)[0][0].shape) == (4, 3, 224, 224)
        side = cache.side_effect(anatomy, pipeline, applied)
        assert side["alters_output"] is False and "Resize of self.transform" in side["prefix"]
    finally:
        applied.cleanup()
    _apply(patch.diff, path)
    runs = _patched_batches(
        path, "inline_albumentations_patched", "small_pipeline", tmp_path, pipeline
    )
    theirs = batches(pipeline.dataset, pipeline)
    for ours in runs:  # albumentations draws from its own generators: compare shapes and labels
        for a, b in zip(ours, theirs):
            assert a[0].shape == b[0].shape and a[0].dtype == b[0].dtype
            assert torch.equal(a[1], b[1])


def test_opencv_integer_transfer_drops_the_normalise_line_and_normalises_per_batch(tmp_path):
    path = _copy("inline_opencv.py", tmp_path)
    pipeline = load_target(f"{path}:small_pipeline")
    anatomy = examine_inline(pipeline.dataset)
    change = InlineIntegerTransfer()
    assert change.applies(anatomy, pipeline) is None
    assert change.slot == (0,) and change.channel == 0 and change.name == "image"
    applied = change.apply(anatomy, pipeline)
    raw = batches(applied.dataset, pipeline)
    assert raw[0][0].dtype == torch.uint8
    theirs = batches(pipeline.dataset, pipeline)
    for ours, reference in zip(raw, theirs):
        normalised = applied.main_step(ours)
        assert torch.max(torch.abs(normalised[0] - reference[0])).item() < 1e-4
    side = change.side_effect(anatomy, pipeline, applied)
    assert side["bytes_per_batch"]["after"] * 4 == side["bytes_per_batch"]["before"]
    patch = change.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert "-        image = (image.astype(np.float32) / 255.0 - MEAN) / STD" in patch.diff
    _apply(patch.diff, path)
    patched = _load(path, "inline_opencv_uint8")
    try:
        dataset = patched.OpenCVDataset(pipeline.dataset.paths)
        for ours, reference in zip(batches(dataset, pipeline), theirs):
            assert ours[0].dtype == torch.uint8
            images = patched.normalize_batch(ours[0])
            assert torch.max(torch.abs(images - reference[0])).item() < 1e-4
    finally:
        sys.modules.pop("inline_opencv_uint8", None)


def test_pil_integer_transfer_names_the_jitter_on_the_float_image(pil):
    _, pipeline = pil
    why = InlineIntegerTransfer().applies(examine_inline(pipeline.dataset), pipeline)
    assert why is not None and "brightness = np.random.uniform" in why


# -- decoders raced on the user's files ------------------------------------------------------------


def _clocked(monkeypatch, ms: dict[str, float]) -> None:
    """Decoder timings from ``ms`` (per image) instead of the clock; pixels still decoded."""
    from stallscope.changes import decoders

    real = decoders.available_decoders
    called: list[str] = []

    def tagged(name, decode):
        def run(data, target):
            called.append(name)
            return decode(data, target)

        return run

    libraries = {name.split()[0] for name in ms}  # "PIL", "OpenCV"

    def available(factor):  # the libraries the test times, whatever else imports here
        return {
            name: tagged(name, d)
            for name, d in real(factor).items()
            if name.split()[0] in libraries
        }

    def fastest(fn, **_):
        called.clear()
        fn()
        return ms.get(called[-1], 50.0) / 1000 * len(called)  # unnamed decoders: slow

    monkeypatch.setattr(decoders, "available_decoders", available)
    monkeypatch.setattr(decoders, "fastest_seconds", fastest)


def test_decoders_importable_here_include_pil_and_opencv():
    from _jpeg_files import jpeg_paths

    from stallscope.changes.decoders import available_decoders

    found = available_decoders(2)
    assert {"PIL", "OpenCV imdecode", "PIL + draft 1/2"} <= set(found)
    data = jpeg_paths(1)[0].read_bytes()
    assert found["PIL"](data, "bgr").shape == found["OpenCV imdecode"](data, "bgr").shape
    assert found["OpenCV imdecode"](data, "pil").size == found["PIL"](data, "pil").size
    assert found["PIL + draft 1/2"](data, "bgr").shape == (288, 384, 3)
    # the same libjpeg underneath: the same pixels, in the layout each call site returns
    assert np.array_equal(found["PIL"](data, "bgr"), found["OpenCV imdecode"](data, "bgr"))


def test_faster_decode_swaps_in_the_faster_decoder_and_its_diff_runs(monkeypatch, pil, tmp_path):
    from stallscope.changes.decoders import FasterDecode

    path, pipeline = pil
    _clocked(monkeypatch, {"PIL": 9.0, "OpenCV imdecode": 4.0})
    anatomy = examine_inline(pipeline.dataset)
    anatomy.seconds_per_sample = 0.012  # decoding: 9 of 12 ms
    change = FasterDecode()
    assert change.applies(anatomy, pipeline) is None
    assert change.best["decoder"] == "OpenCV imdecode" and change.user == "PIL"
    assert [row["decoder"] for row in change.table] == ["OpenCV imdecode", "PIL"]
    applied = change.apply(anatomy, pipeline)
    with seeded(4):
        ours = applied.dataset[2]
    with seeded(4):
        theirs = pipeline.dataset[2]
    side = change.side_effect(anatomy, pipeline, applied)
    if change.best["psnr_db"] is None:  # the same pixels: the same item
        assert equal(ours, theirs) and side["alters_output"] is False
    patch = change.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert "cv2.imread(str(path))" in patch.diff and "+import cv2" in patch.diff
    _apply(patch.diff, path)
    runs = _patched_batches(path, "inline_pil_cv2", "small_pipeline", tmp_path, pipeline)
    assert tuple(runs[0][0][0].shape) == (4, 3, 224, 224)


def test_faster_decode_says_when_decoding_is_small_or_already_fastest(monkeypatch, pil):
    from stallscope.changes.decoders import FasterDecode

    _, pipeline = pil
    _clocked(monkeypatch, {"PIL": 4.0, "OpenCV imdecode": 2.0})
    anatomy = examine_inline(pipeline.dataset)
    anatomy.seconds_per_sample = 0.040  # decoding: 4 of 40 ms
    why = FasterDecode().applies(anatomy, pipeline)
    assert why is not None and why.startswith("decoding is 10% of an item")
    _clocked(monkeypatch, {"PIL": 4.0, "OpenCV imdecode": 9.0})
    anatomy.seconds_per_sample = 0.008
    why = FasterDecode().applies(anatomy, pipeline)
    assert why is not None and why.startswith("PIL, the decoder in use, is the fastest")
    assert "OpenCV imdecode 9.00 ms" in why


def test_an_installed_packages_dataset_is_not_examined():
    albumentations = pytest.importorskip("albumentations")

    class Installed:  # stands for a dataset class defined in site-packages
        __module__ = "albumentations"

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return index

    Installed.__getitem__.__module__ = "albumentations"
    assert "site-packages" in albumentations.__file__
    with pytest.raises(NotApplicable, match="installed package"):
        examine_inline(Installed())


def test_faster_decode_for_an_opencv_reader_rewrites_imread(monkeypatch, tmp_path):
    from stallscope.changes.decoders import FasterDecode

    path = _copy("inline_opencv.py", tmp_path)
    pipeline = load_target(f"{path}:small_pipeline")
    _clocked(monkeypatch, {"PIL": 3.0, "OpenCV imdecode": 8.0})
    anatomy = examine_inline(pipeline.dataset)
    anatomy.seconds_per_sample = 0.010
    change = FasterDecode()
    assert change.applies(anatomy, pipeline) is None
    assert change.user == "OpenCV imdecode" and change.best["decoder"] == "PIL"
    # timed in the layout imread returns; the reduced decoders are listed, not offered
    assert any(row["reduced"] for row in change.table)
    applied = change.apply(anatomy, pipeline)
    with seeded(1):
        ours = applied.dataset[0]
    with seeded(1):
        theirs = pipeline.dataset[0]
    assert equal(ours, theirs)  # the same pixels, in the same BGR layout
    patch = change.patch(anatomy, pipeline)
    assert patch.verified, patch.reason
    assert "cv2.cvtColor(np.asarray(Image.open(self.paths[index])" in patch.diff
    _apply(patch.diff, path)
    runs = _patched_batches(path, "inline_opencv_pil", "small_pipeline", tmp_path, pipeline)
    theirs_batches = batches(pipeline.dataset, pipeline)
    assert all(equal(a, b) for a, b in zip(runs[0], theirs_batches))


def test_integer_transfer_needs_a_uint8_image():
    why = InlineIntegerTransfer().applies(examine_inline(DrawsFromTorch()), None)
    assert why is not None and "leaves a uint8 image" in why
