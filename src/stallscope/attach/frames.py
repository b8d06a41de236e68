"""The stage a sampled frame belongs to, from what the ``stages`` breakdown already knows.

``stages`` times read and decode by wrapping well-known library calls (``breakdown/known_calls``)
and names its rows ``read``, ``decode``, ``collate``, ``transfer: serialise``, ``pin`` and
``other (__getitem__)`` (``breakdown/recorder``, ``breakdown/results``). Here the same calls and
names mark the frames of a sampled stack, so that attach's stage table (folded in
``analysis/attach.py``) uses the rows ``stages`` prints:

- ``stage``: the frame *is* such a call (numpy's ``load``, Pillow's ``ImageFile.load``, torch's
  ``default_collate``, the pickler that sends a batch to the main process, a dataset's
  ``__getitem__``); it holds wherever the frame sits in a stack.
- ``leaf_stage``: the frame's line calls a known call written in C (``cv2.imread(...)``), which has
  no frame of its own: it holds only when this frame is the stack's innermost.
- ``user``: the frame is the user's code (not the standard library or an installed package).
- ``code``: the source line of a user frame, for the calls the analysis reads off it
  (``batch.to(device)``).
"""

from __future__ import annotations

import inspect
import linecache
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ..breakdown.known_calls import _LIBRARY_CALLS
from ..breakdown.recorder import COLLATE, DECODE, OTHER
from ..breakdown.results import PIN, SERIALISE
from .pyspy import Frame

CODE_MAX_CHARS = 160
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "<frozen", "/lib/python3.", "\\lib\\python3.")

# (file path ending or folder, qualified function name or None for any) -> stage; known_calls
# times Pillow's open and lazy load itself (not through _LIBRARY_CALLS), and the loader's own
# collate, serialisation and pinning run in torch's files.
_TORCH_FRAMES: tuple[tuple[str, str | None, str], ...] = (
    ("PIL/Image.py", "open", DECODE),
    ("PIL/ImageFile.py", "ImageFile.load", DECODE),
    ("torch/utils/data/_utils/collate.py", None, COLLATE),
    ("torch/utils/data/_utils/pin_memory.py", None, PIN),
    ("torch/multiprocessing/reductions.py", None, SERIALISE),
    ("multiprocessing/reduction.py", "ForkingPickler.dumps", SERIALISE),
)


def known_call_stages() -> list[tuple[tuple[str, ...], str, str]]:
    """``(module path parts, qualified name, stage)`` for every call ``known_calls`` times, with
    the stage its wrapper times it as."""
    rows = []
    for module, attribute, make in _LIBRARY_CALLS:
        stage = inspect.getclosurevars(make).nonlocals.get("stage")
        if isinstance(stage, str):
            rows.append((tuple(module.split(".")), attribute, stage))
    return rows


def is_user_file(file: str) -> bool:
    return bool(file) and not any(marker in file for marker in _LIBRARY_MARKERS)


def _in_module(file: str, parts: tuple[str, ...]) -> bool:
    path = file.replace("\\", "/")
    joined = "/".join(parts)
    return f"/{joined}/" in path or path.endswith(f"/{joined}.py")


@lru_cache(maxsize=1)
def _calls_on_a_line() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Patterns for a known call made on a source line, named through its module
    (``cv2.imread(``): a bare ``read(`` could be any file's."""
    seen: dict[str, str] = {}
    for parts, attribute, stage in known_call_stages():
        if "." not in attribute:
            seen.setdefault(f"{parts[-1]}.{attribute}", stage)
    return tuple((re.compile(rf"\b{re.escape(call)}\s*\("), stage) for call, stage in seen.items())


def frame_stage(frame: Frame) -> str | None:
    """The stage this frame is, by where it is and what it is called; None for none."""
    file = frame.file.replace("\\", "/")
    for parts, attribute, stage in known_call_stages():
        if frame.name == attribute and _in_module(file, parts):
            return stage
    for ending, name, stage in _TORCH_FRAMES:
        if file.endswith(ending) and (name is None or frame.name == name):
            return stage
    if frame.name.endswith((".__getitem__", ".__getitems__")):
        return OTHER
    if is_user_file(file) and "collate" in frame.name.lower():
        return COLLATE
    return None


def source_line(frame: Frame) -> str | None:
    if not frame.file or frame.line <= 0:
        return None
    text = linecache.getline(frame.file, frame.line).strip()
    return text[:CODE_MAX_CHARS] or None


def leaf_stage(code: str | None) -> str | None:
    if not code:
        return None
    for pattern, stage in _calls_on_a_line():
        if pattern.search(code):
            return stage
    return None


def describe_frames(frames: Iterable[Frame]) -> list[dict[str, Any]]:
    """Each frame as the record keeps it: name, file, line, and the marks above where they
    apply."""
    described = []
    for frame in frames:
        entry: dict[str, Any] = {"name": frame.name, "file": frame.file, "line": frame.line}
        stage = frame_stage(frame)
        if stage:
            entry["stage"] = stage
        if is_user_file(frame.file):
            entry["user"] = True
            code = source_line(frame)
            if code:
                entry["code"] = code
                leaf = leaf_stage(code)
                if leaf:
                    entry["leaf_stage"] = leaf
        described.append(entry)
    return described
