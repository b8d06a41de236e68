"""The rows broken out of ``other (__getitem__)``: the functions ``__getitem__`` calls.

Part of NOTE [stage timing] (``recorder.py``). What ``__getitem__`` does outside any
known stage used to be one opaque row. While a sample is fetched in a worker, a
:class:`CalleeTracer` (a ``sys.setprofile`` hook on the fetching thread) watches the
frame of the dataset's own ``__getitem__`` (or ``__getitems__``, or the stream's
generator) and times each function it calls directly — Python or C, e.g.
``_mosaic()``, ``torch.stft()``, ``cv2.warpAffine()`` — as a stage of its own on
the same recorder stack. Deeper calls belong to the first-level call that made them,
and known stages nested inside (read, decode, transforms, markers) still take their
own time away from it, so every row stays exclusive and the shares still add up to
100%. ``table.build_stage_table`` keeps a call as a row when it holds at least
``CALLEE_MIN_SHARE`` of the sample time and folds the rest back into ``other``.

The hook costs a Python call per function call or return while it is active (about
0.1 ms per sample on ``tests/pipelines/stages_injected.py``, whose ``__getitem__`` makes a
dozen Python-heavy calls; a third of the fetch on a ``__getitem__`` that indexes pandas
frames). So only every ``TRACE_EVERY``-th fetch is traced, and there the rest of
``__getitem__`` is recorded as ``OTHER_TRACED``; the table reads the whole ``other`` time
per sample off the untraced fetches and splits it in the proportions the traced ones
measured (``table._break_out_calls``), so the other stages, and ``other`` with its calls
taken together, are timed on fetches the hook did not slow down. The hook is also
switched off inside known stages (the recorder pauses it there: library internals such as
Pillow's or a transform's are not watched) and stays on only at the level of
``__getitem__`` and inside its first-level calls. Thin wrappers that index another dataset
(``Subset.__getitem__``) are seen through: the inner ``__getitem__`` is watched.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from typing import Any

CALLEE_PREFIX = "call: "  # recorder key of a first-level call, e.g. "call: _mosaic()"
OTHER_TRACED = "other (__getitem__, traced)"  # recorder key of the rest of a traced fetch
# Only every second fetch pays the tracing hook; the others time the remaining stages unslowed.
TRACE_EVERY = 2
# A call under 5% of the sample time is no stage of its own: it folds back into ``other``.
CALLEE_MIN_SHARE = 0.05
# Calls that only dispatch to an object (nn.Module, a callable class): named after the object.
_DISPATCH = frozenset({"__call__", "_wrapped_call_impl", "_call_impl", "forward"})
# Calls that index another dataset: watched through, not timed as a row.
_TRANSPARENT = frozenset({"__getitem__", "__getitems__", "__next__"})
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the stallscope package
_LIBRARY_ROOTS = tuple(
    {
        os.path.abspath(p)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
_C_CALL = object()  # marks an open first-level call of a C function


def is_callee(name: str) -> bool:
    return name.startswith(CALLEE_PREFIX)


def callee_label(name: str) -> str:
    return name[len(CALLEE_PREFIX) :]


class CalleeTracer:
    """Times the first-level calls of one fetch as recorder stages (see module docstring)."""

    _names: dict[
        tuple[Any, Any], str | None
    ] = {}  # (code, __getitem__'s code) -> row name; None: ours

    def __init__(self, recorder: Any, root: Any) -> None:
        self.recorder = recorder
        self.root = root  # our wrapper's frame; the first frame it calls is the dataset's
        self.target: Any = None
        self.outer: list[Any] = []  # the wrappers' frames while an inner __getitem__ runs
        self.open: Any = None  # the open first-level call's frame, or _C_CALL
        self.previous: Any = None
        self.hook = self._event

    def start(self) -> None:
        self.previous = sys.getprofile()
        self.recorder.tracer = self
        sys.setprofile(self.hook)

    def close_call(self) -> None:
        """Close a call still open when the fetch ends (it raised through ``__getitem__``)."""
        if self.open is not None:
            self.open = None
            self.recorder.pop()

    def stop(self) -> None:
        sys.setprofile(self.previous)
        self.recorder.tracer = None

    def pause(self) -> None:
        sys.setprofile(None)

    def resume(self) -> None:
        sys.setprofile(self.hook)

    def _event(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if self.open is not None:
                return
            back = frame.f_back
            if back is self.target and self.target is not None:
                code = frame.f_code
                if code.co_name in _TRANSPARENT:
                    self.outer.append(self.target)
                    self.target = frame
                    return
                name = self._python_name(frame, code)
                if name is not None:
                    self.open = frame
                    self.recorder.push(CALLEE_PREFIX + name, traced=True)
            elif self.target is None and back is self.root:
                self.target = frame
        elif event == "return":
            if frame is self.open:
                self.open = None
                self.recorder.pop()
            elif frame is self.target and self.outer:  # back in the wrapper, which may call more
                self.target = self.outer.pop()
        elif event == "c_call":
            if self.open is None and frame is self.target and self.target is not None:
                self.open = _C_CALL
                self.recorder.push(CALLEE_PREFIX + c_function_name(arg), traced=True)
        elif self.open is _C_CALL and frame is self.target:  # c_return, c_exception
            self.open = None
            self.recorder.pop()

    def _python_name(self, frame: Any, code: Any) -> str | None:
        if code.co_name in _DISPATCH and "self" in frame.f_locals:
            return f"{type(frame.f_locals['self']).__name__}()"
        key = (code, self.target.f_code)
        try:
            return self._names[key]
        except KeyError:
            pass
        name = python_function_name(code, frame.f_globals.get("__name__") or "", self.target.f_code)
        self._names[key] = name
        return name


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return (
        filename.startswith("<")
        or "site-packages" in path
        or "dist-packages" in path
        or path.startswith(_LIBRARY_ROOTS)
    )


def python_function_name(code: Any, module: str, getitem_code: Any) -> str | None:
    """``torch.stft()`` for a library function, ``_mosaic()`` for a method of the dataset's
    own class, ``Augmenter.apply()`` for other code of the user's; None for stallscope's own."""
    if os.path.abspath(code.co_filename).startswith(_OURS + os.sep):
        return None  # our wrappers: the known stages they time are rows already
    qualname = getattr(code, "co_qualname", code.co_name)
    if code.co_name in ("__init__", "__new__") and "." in qualname:
        qualname = qualname.rpartition(".")[0]  # building an object: named after its class
    if _is_library(code.co_filename):
        return f"{_public(module, qualname)}()"
    owner = getattr(getitem_code, "co_qualname", "").rpartition(".")[0]
    if owner and qualname.startswith(owner + "."):
        qualname = qualname[len(owner) + 1 :]
    return f"{qualname}()"


def c_function_name(func: Any) -> str:
    """``cv2.resize()``, ``torch.conv1d()``, ``torch.Tensor.abs()``, ``len()``."""
    qualname = (
        getattr(func, "__qualname__", None)
        or getattr(func, "__name__", None)
        or type(func).__name__
    )
    module = getattr(func, "__module__", None)
    owner = getattr(func, "__self__", None)
    if module is None and owner is not None:
        module = owner.__name__ if isinstance(owner, types.ModuleType) else type(owner).__module__
    if module is None:
        module = _module_holding(func)
    if not module or module == "builtins":
        return f"{qualname}()"
    return f"{_public(module, qualname)}()"


_HOLDERS: dict[int, str | None] = {}


def _module_holding(func: Any) -> str | None:
    """The imported module that has ``func`` as an attribute (extension functions such as
    OpenCV's carry neither ``__module__`` nor ``__self__``); looked up once per function."""
    key = id(func)
    if key not in _HOLDERS:
        name = getattr(func, "__name__", None)
        # the modules' own dicts: a module-level __getattr__ could warn or import
        found = [
            m
            for m, mod in list(sys.modules.items())
            if name and (getattr(mod, "__dict__", None) or {}).get(name) is func
        ]
        _HOLDERS[key] = min(found, key=len) if found else None
    return _HOLDERS[key]


def _public(module: str, qualname: str) -> str:
    """The name a user would write: the top-level package, private classes left out
    (``torch._C._VariableFunctionsClass.conv1d`` -> ``torch.conv1d``)."""
    top = module.split(".")[0].lstrip("_") or module
    parts = qualname.split(".")
    kept = [p for p in parts[:-1] if not p.startswith("_") and p != "<locals>"] + parts[-1:]
    return ".".join([top, *kept]).replace("TensorBase.", "Tensor.")
