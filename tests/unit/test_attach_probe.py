"""The attach probe: py-spy's speedscope output parsed, frames marked with stages, the process
tree, and py-spy's failures as one sentence. Fixtures are real py-spy 0.4.3 output of
``tests/pipelines/attach_training.py`` (20 Hz for 3 s)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stallscope.attach import frames as fr
from stallscope.attach.processes import ProcessInfo, target_process, training_processes
from stallscope.attach.pyspy import (
    Frame,
    describe_failure,
    find_py_spy,
    parse_speedscope,
    run_lengths,
    sampler_errors,
)
from stallscope.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "attach"


def speedscope(name: str) -> dict:
    return json.loads((FIXTURES / f"pyspy_{name}.json").read_text())


def test_parse_keeps_every_thread_in_time_order_and_drops_pseudo_frames():
    capture = parse_speedscope(speedscope("input"))
    assert capture.interval_s == pytest.approx(0.05)
    assert capture.parents == {27600: None, 27710: 27600, 27711: 27600}
    threads = {(t.pid, t.name) for t in capture.threads}
    assert (27600, "MainThread") in threads and (27710, "MainThread") in threads
    assert len(capture.threads) == 9
    assert all(len(t.samples) == 59 for t in capture.threads)
    assert not any(f.name.startswith(("process ", "thread (")) for f in capture.frames)
    main = next(t for t in capture.threads if t.pid == t.tid == 27600)
    # root first: every main-thread stack starts at the script's module frame
    assert {capture.frames[capture.stacks[s][0]].name for s in main.samples} == {"<module>"}


def test_parse_skips_profiles_it_cannot_name_and_empty_documents():
    empty = parse_speedscope({"shared": {"frames": []}, "profiles": [{"name": "x", "samples": []}]})
    assert empty.threads == [] and empty.frames == [] and empty.parents == {}


def test_the_samples_py_spy_could_not_read_are_counted():
    assert sampler_errors("py-spy> Wrote speedscope file to 'x'. Samples: 1341 Errors: 3") == 3
    assert sampler_errors("nothing said") is None


def test_run_lengths_keep_time_order():
    assert run_lengths([3, 3, 1, 3, 3, 3]) == [[3, 2], [1, 1], [3, 3]]
    assert run_lengths([]) == []


def test_frames_are_marked_with_the_stages_the_breakdown_knows():
    numpy_load = Frame("load", "/venv/lib/python3.11/site-packages/numpy/lib/_npyio_impl.py", 400)
    assert fr.frame_stage(numpy_load) == "read"
    assert fr.frame_stage(Frame("ImageFile.load", "/x/site-packages/PIL/ImageFile.py", 1)) == (
        "decode"
    )
    collate = Frame("default_collate", "/x/site-packages/torch/utils/data/_utils/collate.py", 1)
    assert fr.frame_stage(collate) == "collate"
    dumps = Frame("ForkingPickler.dumps", "/usr/lib/python3.11/multiprocessing/reduction.py", 51)
    assert fr.frame_stage(dumps) == "transfer: serialise"
    assert fr.frame_stage(Frame("Faces.__getitem__", "/home/me/train.py", 9)) == (
        "other (__getitem__)"
    )
    assert fr.frame_stage(Frame("my_collate", "/home/me/train.py", 3)) == "collate"
    assert fr.frame_stage(Frame("helper", "/home/me/train.py", 3)) is None
    # a C call has no frame: the line that makes it holds only as the innermost frame
    assert fr.leaf_stage("image = cv2.imread(path)") == "decode"
    assert fr.leaf_stage("data = handle.read()") is None
    assert fr.leaf_stage(None) is None


def test_every_known_call_has_a_stage():
    rows = fr.known_call_stages()
    assert {stage for _, _, stage in rows} == {"read", "decode"}
    assert (("cv2",), "imread", "decode") in rows and (("numpy",), "load", "read") in rows


def test_describe_frames_reads_user_lines(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def step(batch):\n    batch = batch.to('cuda')\n    img = cv2.imdecode(b)\n")
    described = fr.describe_frames(
        [
            Frame("step", str(script), 2),
            Frame("step", str(script), 3),
            Frame("load", "/x/site-packages/torch/serialization.py", 1),
        ]
    )
    assert described[0] == {
        "name": "step",
        "file": str(script),
        "line": 2,
        "user": True,
        "code": "batch = batch.to('cuda')",
    }
    assert described[1]["leaf_stage"] == "decode"
    assert described[2] == {
        "name": "load",
        "file": "/x/site-packages/torch/serialization.py",
        "line": 1,
        "stage": "read",
    }


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("Error: Permission denied (os error 13)", "--cap-add SYS_PTRACE"),
        ("Error: Operation not permitted (os error 1)", "kernel.yama.ptrace_scope"),
        ("Error: Failed to find python version from target process", "not a Python process"),
        (
            "Error: Failed to get process executable name. Check that the process is running.",
            "ended",
        ),
        ("Error: something new\n\nStack backtrace:\n 0: x", "something new"),
    ],
)
def test_py_spy_failures_are_one_sentence(output, says):
    message = describe_failure(42, output)
    assert says in message
    assert "\n" not in message and "backtrace" not in message.lower()


def test_py_spy_is_found_next_to_this_python():
    found = find_py_spy()
    assert found is not None and os.path.basename(found).startswith("py-spy")


def test_a_pid_that_is_not_running_or_not_ours_to_sample():
    with pytest.raises(UsageError, match="no process with PID"):
        target_process(2**22 + 12345)
    with pytest.raises(UsageError, match="itself"):
        target_process(os.getpid())
    with pytest.raises(UsageError, match="not a process id"):
        target_process(0)


def _info(pid, parent, name="python", cmdline="python train.py", rank=None):
    return ProcessInfo(pid, parent, name, cmdline, rank)


def test_training_processes_are_the_target_or_the_ranks_under_a_launcher():
    plain = [_info(10, None), _info(11, 10), _info(12, 10)]
    assert training_processes(plain) == [10]
    launcher = [
        _info(10, None, cmdline="python -m torch.distributed.run --nproc-per-node 2 t.py"),
        _info(11, 10, rank=0),
        _info(12, 10, rank=1),
        _info(13, 11),  # rank 0's worker
    ]
    assert training_processes(launcher) == [11, 12]
    # --tree: every Python child is a rank when RANK cannot be read
    assert training_processes(plain, whole_tree=True) == [11, 12]


def test_py_spy_missing_is_one_sentence(monkeypatch):
    from stallscope.attach import pyspy

    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    with pytest.raises(UsageError, match=r"py-spy is not installed; install it with `pip install"):
        pyspy.record_speedscope(os.getpid(), duration_s=1, rate_hz=10)
