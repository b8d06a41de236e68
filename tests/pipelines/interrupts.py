"""Helpers for tests that press Ctrl-C on a real CLI process."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` that gives the child the default SIGINT disposition.

    A test run started as a shell's background job (``cmd &`` without job control) inherits
    SIGINT ignored; Python then never raises KeyboardInterrupt, and the Ctrl-C under test would
    do nothing. Restoring the default before exec makes the child behave as in a terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
