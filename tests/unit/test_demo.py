"""The built-in demo (SPEC §6): cached deterministic build, the dataset, its pipeline."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch.utils.data import DataLoader

import stallscope as ss
from stallscope import demo
from stallscope.demo import cache as demo_cache
from stallscope.demo.cache import MARKER, build_demo_dataset, demo_dir, is_complete
from stallscope.demo.dataset import DemoImageFolder
from stallscope.demo.scenes import CLASSES, SIZE_RANGE
from stallscope.demo.transforms import CROP_SIZE, train_transforms

SMALL = 7  # images per class in tests: 35 images, more than one batch of 32


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_demo_dataset(tmp_path_factory.mktemp("cache"), images_per_class=SMALL)


def test_build_makes_a_class_folder_of_jpegs_and_a_marker(built):
    assert built.built and built.images == SMALL * len(CLASSES)
    assert built.classes == sorted(CLASSES)
    assert (built.path / MARKER).is_file() and built.path.name == "demo-v1"
    sizes = set()
    from PIL import Image

    for path in sorted(built.path.glob("*/*.jpg"))[:10]:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            sizes.add(image.size)
            assert all(SIZE_RANGE[0] <= side <= SIZE_RANGE[1] for side in image.size)
    assert len(sizes) > 1, "sizes vary like photographs"
    assert built.bytes > 20_000 * built.images, "photo-like texture, not flat colour"


def test_second_build_is_a_no_op(built):
    again = build_demo_dataset(built.path.parent, images_per_class=SMALL)
    assert not again.built and again.images == built.images and again.seconds < 1.0


def test_generation_is_deterministic(built, tmp_path):
    other = build_demo_dataset(tmp_path, images_per_class=2)
    theirs = {p.name: p.read_bytes() for p in other.path.glob("*/*.jpg")}
    ours = {p.name: p.read_bytes() for p in built.path.glob("*/*.jpg") if p.name in theirs}
    assert ours == theirs and len(theirs) == 2 * len(CLASSES)


def test_an_interrupted_build_is_redone(tmp_path):
    final = demo_dir(tmp_path)
    (final / "beach").mkdir(parents=True)
    (final / "beach" / "half-written.jpg").write_bytes(b"\xff\xd8")  # no marker: unfinished
    abandoned = final.with_name(f"{final.name}.building-999999999")
    abandoned.mkdir()
    result = build_demo_dataset(tmp_path, images_per_class=1)
    assert result.built and result.images == len(CLASSES)
    assert not (final / "beach" / "half-written.jpg").exists()
    assert not abandoned.exists()
    assert is_complete(final, 1)


def test_items_are_normalised_image_tensors_with_labels(built):
    dataset = DemoImageFolder(built.path, transform=train_transforms())
    assert len(dataset) == SMALL * len(CLASSES)
    image, label = dataset[0]
    assert image.shape == (3, CROP_SIZE, CROP_SIZE) and image.dtype == torch.float32
    assert isinstance(label, int) and 0 <= label < len(CLASSES)
    assert -3.0 < float(image.min()) < float(image.max()) < 3.0  # normalised, not [0, 255]
    assert dataset[len(dataset) - 1][1] == len(CLASSES) - 1


def test_pipeline_is_a_composed_list_of_named_picklable_transforms():
    pipeline = train_transforms()
    names = [type(t).__name__ for t in pipeline.transforms]
    assert names == [
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ColorJitter",
        "ToTensor",
        "Normalize",
    ]
    clone = pickle.loads(pickle.dumps(pipeline))
    assert [type(t).__name__ for t in clone.transforms] == names


def test_two_spawn_workers_load_batches_with_different_augmentations(built):
    dataset = DemoImageFolder(built.path, transform=train_transforms())
    loader = DataLoader(
        dataset, batch_size=4, num_workers=2, multiprocessing_context="spawn", sampler=[0] * 8
    )
    batches = [images for images, _ in loader]
    assert len(batches) == 2 and batches[0].shape == (4, 3, CROP_SIZE, CROP_SIZE)
    # the same image, augmented in two workers: Python's random is reseeded per worker
    assert not torch.equal(batches[0][0], batches[1][0])


def test_target_factory_uses_the_cache(built, monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CACHE", str(built.path.parent))
    monkeypatch.setattr(demo_cache, "IMAGES_PER_CLASS", SMALL)
    target = demo.pipeline()
    assert target["batch_size"] == 32 and len(target["dataset"]) == built.images
    pipeline = ss.load_target("stallscope.demo:pipeline")
    assert pipeline.batch_size == 32 and pipeline.dataset.root == str(built.path)
    with_model = demo.pipeline_with_model()
    images, labels = next(iter(DataLoader(with_model["dataset"], batch_size=4)))
    loss = with_model["train_step"](with_model["model"], (images, labels))
    assert loss == loss and loss > 0  # finite cross-entropy


def test_stages_on_the_demo_names_each_transform_and_finds_read_and_decode(built):
    dataset = DemoImageFolder(built.path, transform=train_transforms())
    result = ss.stages(
        {"dataset": dataset, "batch_size": 8},
        num_workers=1,
        start_method="fork",
        samples=24,
        hotspots=3,
        differential=False,
    )
    names = [s.name for s in result.stages]
    assert names[:7] == [
        "read",
        "decode",
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ColorJitter",
        "ToTensor",
        "Normalize",
    ]
    assert all(result.stage(n).ms_per_sample > 0 for n in names[:7])
    assert result.augmentation_overhead.transforms == [
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ColorJitter",
    ]
    assert result.transfer["batch_bytes"] == 8 * 3 * CROP_SIZE**2 * 4 + 8 * 8
    assert len(result.hotspots) == 3
    assert os.path.isdir(built.path)
