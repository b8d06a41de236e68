"""Ctrl-C stops a command with exit 130 even where Python swallowed the KeyboardInterrupt."""

from __future__ import annotations

import os
import signal

import pytest

from stallscope.commands import _common as common


@pytest.fixture(autouse=True)
def python_sigint():
    """Python's own Ctrl-C handler, as in a terminal (a suite run as a background job inherits
    SIGINT ignored, and stallscope then leaves that choice alone)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _parser():
    return common.command_parser("stallscope test", "a command for the test")


def test_a_swallowed_ctrl_c_still_ends_the_command_with_130(capsys):
    def body(ctx):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        except KeyboardInterrupt:
            pass  # as an at-fork hook or a finaliser would: "Exception ignored in ..."
        return 0

    assert common.execute(_parser(), ["target.py:make"], body) == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_command_without_ctrl_c_keeps_its_exit_code():
    assert common.execute(_parser(), ["target.py:make"], lambda ctx: 0) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_is_one_line_however_long_its_path(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = "/tmp/" + "a-long-folder-name/" * 8 + "no_such_run.json"

    def body(ctx):
        raise common.UsageError(f"cannot read {path}: No such file or directory.")

    assert common.execute(_parser(), ["target.py:make"], body) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and path in lines[0]  # the terminal wraps it; the path stays whole
