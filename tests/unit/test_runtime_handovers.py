"""A worker that dies while torch hands its tensors over as file descriptors resets the
resource-sharer thread's connection; that thread's traceback is dropped while a command runs,
and nothing else is (NOTE [worker death] in ``runtime/processes.py``)."""

from __future__ import annotations

import sys

from stallscope.runtime.processes import quiet_lost_handovers


def _raised_in(filename: str, exc: BaseException):
    try:
        exec(compile("raise exc", filename, "exec"), {"exc": exc})
    except BaseException:
        return sys.exc_info()
    raise AssertionError("did not raise")


def test_only_the_resource_sharers_connection_errors_are_dropped(capsys):
    sharer = "/usr/lib/python3.11/multiprocessing/resource_sharer.py"
    before = sys.excepthook
    with quiet_lost_handovers():
        sys.excepthook(*_raised_in(sharer, ConnectionResetError(104, "Connection reset by peer")))
        sys.excepthook(*_raised_in(sharer, EOFError()))
        assert capsys.readouterr().err == ""
        # The same error from anywhere else, or another error from the sharer, still prints.
        sys.excepthook(*_raised_in("/home/me/train.py", ConnectionResetError(104, "reset")))
        sys.excepthook(*_raised_in(sharer, ValueError("a real bug")))
        err = capsys.readouterr().err
        assert "train.py" in err and "ConnectionResetError" in err and "ValueError" in err
    assert sys.excepthook is before
