"""Python stacks of probe workers: parse a ``faulthandler`` dump, find the user's frame in it."""

from __future__ import annotations

import functools
import re
import sysconfig
from pathlib import Path
from typing import Any

# Frames in this package are the probe's own (where a wait is, not why).
THIS_PACKAGE = str(Path(__file__).resolve().parent)


def frame_label(filename: str, lineno: int | None, name: str) -> str:
    """``file:line in function``, the form every finding uses."""
    return f"{filename}:{lineno} in {name}"


_THREAD_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


def parse_stack(text: str) -> list[dict[str, Any]]:
    """The main thread's frames from a faulthandler dump, innermost first."""
    lines = text.splitlines()
    main_ident = None
    if lines and lines[0].startswith("MAIN "):
        main_ident = int(lines[0].split()[1], 16)
    threads: dict[int, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] | None = None
    for line in lines:
        header = _THREAD_HEADER.match(line)
        if header:
            current = threads.setdefault(int(header.group(2), 16), [])
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            current.append(
                {
                    "file": frame.group(1),
                    "line": int(frame.group(2)),
                    "function": frame.group(3).strip(),
                }
            )
    if main_ident is not None and main_ident in threads:
        return threads[main_ident]
    return next(iter(threads.values()), [])


_STDLIB_PATTERN = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?[/\\]")


@functools.lru_cache(maxsize=4096)
def is_library(path: str, *, packages: bool = False) -> bool:
    """Frames of this probe or of the standard library (where a wait is, not why); installed
    packages too with ``packages``."""
    if path.startswith(THIS_PACKAGE) or path.startswith("<"):
        return True
    if "site-packages" in path or "dist-packages" in path:
        return packages
    stdlib = _stdlib()
    return (bool(stdlib) and path.startswith(stdlib)) or bool(_STDLIB_PATTERN.search(path))


@functools.lru_cache(maxsize=1)
def _stdlib() -> str:
    return sysconfig.get_paths().get("stdlib", "")


def stuck_frame(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost frame outside the standard library and this probe (where the user's code
    waits)."""
    for frame in frames:
        if not is_library(frame["file"]):
            return frame
    return frames[0] if frames else None
