"""What the user's code prints when a command calls it again: held back, counted, said once
(NOTE [held output])."""

from __future__ import annotations

import sys
import threading

import pytest

from stallscope.runtime.held_output import first_line, held_call, held_note, holding


def _print_both(text: str) -> None:
    print(text)
    print(text, file=sys.stderr)


def test_outside_a_command_the_users_output_is_left_as_it_is(capsys):
    with held_call():
        _print_both("loading")
    out, err = capsys.readouterr()
    assert out == "loading\n" and err == "loading\n"


def test_inside_a_command_each_calls_output_is_held_and_counted(capsys):
    with holding() as held:
        for k in range(3):
            with held_call():
                if k:
                    _print_both(f"\rCaching: 50%\rCaching: 100% ({k})")
    assert capsys.readouterr() == ("", "")
    assert (held.calls, held.printing_calls) == (3, 2)
    assert held.first_line == "Caching: 100% (1)"  # a redrawn line's last drawing
    note = held_note(held)
    assert note is not None
    assert "on 2 of the 3 calls" in note and "'Caching: 100% (1)'" in note


def test_another_threads_writes_go_through_while_a_call_is_held(capsys):
    """rich's progress display refreshes from its own thread through the same sys.stderr."""
    written = threading.Event()

    def other() -> None:
        print("progress refresh", file=sys.stderr)
        written.set()

    with holding() as held, held_call():
        print("held", file=sys.stderr)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert written.is_set()
    assert capsys.readouterr().err == "progress refresh\n"
    assert held.first_line == "held"


def test_a_call_that_raises_has_its_output_written_out(capsys):
    with holding() as held:
        with pytest.raises(ValueError), held_call():
            print("why it failed", file=sys.stderr)
            raise ValueError("bad shard")
    assert "why it failed" in capsys.readouterr().err
    assert held.printing_calls == 0 and held_note(held) is None


def test_the_streams_are_put_back_unless_the_users_code_replaced_them():
    before = sys.stdout, sys.stderr
    with holding(), held_call():
        pass
    assert (sys.stdout, sys.stderr) == before

    class Theirs:
        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            pass

    theirs = Theirs()
    try:
        with holding(), held_call():
            sys.stdout = theirs  # type: ignore[assignment]
        assert sys.stdout is theirs
    finally:
        sys.stdout = before[0]


def test_the_note_says_each_call_or_the_one_call_and_cuts_a_long_line():
    with holding() as held:
        with held_call():
            print("x" * 300)
    assert "on the call" in (held_note(held) or "")
    assert len(held_note(held, width=40) or "") < 300
    with holding() as every:
        for _ in range(2):
            with held_call():
                print("banner")
    assert "on each of the 2 calls" in (held_note(every) or "")
    assert first_line("\n\n  \n") == ""
