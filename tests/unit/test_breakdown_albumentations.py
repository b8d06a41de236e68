"""``stages`` on a real albumentations ``Compose``: each transform is a stage, by name, timed in
the workers."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("albumentations")

import stages_albumentations as pipeline  # noqa: E402

import stallscope as ss  # noqa: E402
from stallscope.pipeline.transforms import find_transforms  # noqa: E402

TARGET = f"{Path(pipeline.__file__)}:make_dataset"


def test_compose_elements_are_found_in_order_with_the_random_one_marked():
    slots = find_transforms(pipeline.make_dataset())
    assert [s.name for s in slots] == ["HorizontalFlip", "SleepyShift", "Normalize"]
    assert [s.random for s in slots] == [True, False, False]


def test_stages_times_each_albumentations_transform_inside_the_workers():
    result = ss.stages(
        TARGET, num_workers=1, samples=48, batch_size=8, start_method="fork", hotspots=0
    )
    d = result.to_dict()
    ms = {s["name"]: s["ms_per_sample"] for s in d["stages"]}
    assert {"HorizontalFlip", "SleepyShift", "Normalize"} <= set(ms)
    # A 3 ms sleep takes at least 3 ms; on a loaded machine it overshoots, never by 3 ms more.
    assert pipeline.SLEEPY_S * 1000 <= ms["SleepyShift"] < 2 * pipeline.SLEEPY_S * 1000
    assert max(ms, key=ms.get) == "SleepyShift"
    assert d["augmentation_overhead"]["transforms"] == ["HorizontalFlip"]
