"""Read/decode found in library calls beyond Pillow (OpenCV, wave, scipy, NumPy files and memory
maps), with the real libraries where installed; the wrappers leave results unchanged and are
removed afterwards."""

from __future__ import annotations

import importlib.util
import sys
import types
import wave

import cv2
import numpy as np
import pytest
import stages_libraries as sl
import torch

import stallscope as ss
from stallscope.breakdown.known_calls import known_calls_timed
from stallscope.breakdown.recorder import _ACTIVE, StageRecorder

HAS_SCIPY = importlib.util.find_spec("scipy") is not None


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("libraries")
    rows = np.arange(16 * 1024, dtype=np.float32).reshape(16, 1024)
    rows.tofile(folder / "rows.bin")
    np.save(folder / "rows.npy", rows)
    return {
        "images": sl.write_images(folder / "images"),
        "wavs": sl.write_wavs(folder / "wavs"),
        "bin": str(folder / "rows.bin"),
        "npy": str(folder / "rows.npy"),
    }


CASES = {
    # name: (dataset factory, stages that must appear with time, stages that must not)
    "cv2.imread": (lambda f: sl.OpenCVImages(f["images"]), {"read", "decode"}, set()),
    "cv2.imdecode": (lambda f: sl.OpenCVImages(f["images"], imdecode=True), {"decode"}, {"read"}),
    "wave": (lambda f: sl.WaveClips(f["wavs"]), {"read"}, {"decode"}),
    "numpy.fromfile": (lambda f: sl.RawArrays(f["bin"], 16, 1024), {"read"}, {"decode"}),
    "numpy.memmap": (lambda f: sl.RawArrays(f["bin"], 16, 1024, "memmap"), {"read"}, {"decode"}),
    "np.load(mmap_mode)": (
        lambda f: sl.RawArrays(f["npy"], 16, 1024, "np.load"),
        {"read"},
        {"decode"},
    ),
}
if HAS_SCIPY:
    CASES["scipy.io.wavfile.read"] = (
        lambda f: sl.WaveClips(f["wavs"], reader="scipy"),
        {"read", "decode"},
        set(),
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_library_reads_are_stages_in_a_worker(case, files):
    make, present, absent = CASES[case]
    result = ss.stages(
        {"dataset": make(files), "batch_size": 4},
        num_workers=1,
        samples=16,
        start_method="fork",
        hotspots=0,
        differential=False,
    )
    names = {s.name: s for s in result.stages}
    for stage in present:
        assert names[stage].ms_per_sample > 0, case
    assert not absent & set(names), case
    assert sum(s.share for s in result.stages) == pytest.approx(1.0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_timed_calls_return_what_the_library_returns(case, files):
    dataset = CASES[case][0](files)
    plain = [dataset[i] for i in range(4)]
    recorder = StageRecorder()
    token = _ACTIVE.set(recorder)
    try:
        with known_calls_timed():
            timed = [dataset[i] for i in range(4)]
    finally:
        _ACTIVE.reset(token)
    assert all(torch.equal(a, b) for a, b in zip(plain, timed))
    assert set(recorder.totals) & {"read", "decode"}


def test_the_wrappers_are_removed_after_an_in_process_run(files):
    originals = (
        cv2.imread,
        cv2.imdecode,
        np.fromfile,
        np.memmap.__dict__["__getitem__"],
        wave.open,
    )
    result = ss.stages(
        {"dataset": sl.OpenCVImages(files["images"]), "batch_size": 4},
        num_workers=0,
        samples=8,
        hotspots=0,
        differential=False,
    )
    assert result.stage("decode").ms_per_sample > 0 and result.stage("read").ms_per_sample > 0
    after = (cv2.imread, cv2.imdecode, np.fromfile, np.memmap.__dict__["__getitem__"], wave.open)
    assert all(a is b for a, b in zip(originals, after))


def test_cv2_imread_of_a_missing_file_still_returns_none(tmp_path):
    recorder = StageRecorder()
    token = _ACTIVE.set(recorder)
    try:
        with known_calls_timed():
            assert cv2.imread(str(tmp_path / "missing.jpg")) is None
    finally:
        _ACTIVE.reset(token)
    assert "read" not in recorder.totals  # nothing was read, the call itself is the decode attempt


def test_a_library_is_only_patched_when_the_pipeline_imported_it(monkeypatch):
    """pandas is not a dependency: a stand-in module shows that an imported reader is timed
    (its file read as "read", the parse as "decode") and restored, and that nothing is imported."""
    # Whether another test in this process imported the real pandas (datasets and PyG do) must
    # not decide whether this one runs: it is taken out of sys.modules for the test.
    monkeypatch.delitem(sys.modules, "pandas", raising=False)
    with known_calls_timed():
        assert "pandas" not in sys.modules  # stallscope imports no library itself
    fake = types.ModuleType("pandas")

    def read_csv(path):
        with open(path) as handle:
            return handle.read().splitlines()

    fake.read_csv = read_csv
    monkeypatch.setitem(sys.modules, "pandas", fake)
    recorder = StageRecorder()
    token = _ACTIVE.set(recorder)
    try:
        with known_calls_timed():
            assert fake.read_csv is not read_csv
            assert fake.read_csv(__file__)[0].startswith('"""Read/decode')
    finally:
        _ACTIVE.reset(token)
    assert fake.read_csv is read_csv
    assert recorder.totals["read"] > 0 and recorder.totals["decode"] > 0
