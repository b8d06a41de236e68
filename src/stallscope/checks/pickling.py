"""Probe: can the dataset, collate_fn and worker_init_fn travel to a spawn/forkserver worker?

Under spawn and forkserver (the default on macOS and Windows, and on Linux from
Python 3.14) a DataLoader pickles the dataset, the collate function and the
worker_init_fn for every worker with multiprocessing's ``ForkingPickler``. This
probe does the same, with two differences that keep it cheap and free of side
effects: tensor and array payloads are replaced by a small stand-in (they always
pickle, and pickling them through ``ForkingPickler`` would move them into shared
memory), and the pickled size is counted as evidence.

When pickling fails, :func:`find_culprits` walks the object graph the way pickle
does (``__reduce_ex__`` state, containers, partials, bound methods), bisecting
long containers, and reports the attribute path of each object that cannot be
pickled (``dataset.transform.fn``) with what it is (a lambda, a closure, an open
file...). When pickling succeeds, a fresh interpreter with this process's
``sys.path`` (what a spawn worker starts from) loads the pickle, which catches
classes a fresh interpreter cannot import (defined in a notebook, or in
a module that is not on ``sys.path``).

NOTE [probes on real objects]
A probe must never report an error its own machinery caused. The stand-ins
above only size the pickle: an object whose ``__setstate__`` rebuilds a tensor
from its pickled array (``torch.as_tensor(state["ranks"])``, as tokenizers with
array-backed vocabularies do) fails on a stand-in and loads fine from the real
payload. So the fresh interpreter loads a second pickle of the real objects,
arrays by value (a plain ``pickle.Pickler``: no shared memory is touched). When
that cannot be done (the payload is too large to copy, or the objects only
pickle through multiprocessing's own reducers), the load is *not checked*, with
the reason, and never reported as a finding. Worker probes follow the same rule
(``runner.py``: a probe that cannot run is recorded under ``not_checked``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import types
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import describe_exception
from ..record.as_dict import AsDict
from .pickler import pickle_real, try_pickle

# Long containers are bisected rather than pickled item by item.
_BISECT_ABOVE = 32
_MAX_CULPRITS = 10
_WALK_SECONDS = 10.0
# Above this much array payload, the fresh load (which needs the real payload) is not tried.
FRESH_LOAD_MAX_ARRAY_BYTES = 512 * 1024 * 1024


# -- describing what failed ---------------------------------------------------------


def _where(code: types.CodeType) -> str:
    return f"{_short_path(code.co_filename)}:{code.co_firstlineno}"


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _lock_types() -> tuple[type, ...]:
    kinds: list[type] = [type(threading.Lock()), type(threading.RLock())]
    with contextlib.suppress(Exception):
        import multiprocessing.synchronize as mps

        kinds.append(mps.SemLock)
    return tuple(kinds)


_HANDLE_MODULES = (
    "sqlite3",
    "psycopg",
    "pymysql",
    "MySQLdb",
    "lmdb",
    "h5py",
    "redis",
    "pymongo",
    "boto",
    "requests",
)


def describe_object(obj: Any) -> tuple[str, str]:
    """``(kind, one-line description)`` of an object that cannot be pickled."""
    if isinstance(obj, types.FunctionType):
        where = _where(obj.__code__)
        if obj.__name__ == "<lambda>":
            return "lambda", f"lambda defined at {where}"
        if "<locals>" in obj.__qualname__:
            cells = obj.__code__.co_freevars
            closure = f" closing over {', '.join(cells)}" if cells else ""
            return (
                "local function",
                f"local function {obj.__qualname__}{closure} defined at {where}",
            )
        return (
            "function",
            f"function {obj.__module__}.{obj.__qualname__} defined at {where}, not "
            "importable by that name",
        )
    if isinstance(obj, types.GeneratorType):
        return "generator", f"generator {obj.__qualname__}"
    if isinstance(obj, io.IOBase):
        name = getattr(obj, "name", None)
        mode = getattr(obj, "mode", None)
        label = f"open file {name!r}" if name is not None else f"open {type(obj).__name__}"
        return "open file", label + (f" (mode {mode!r})" if mode else "")
    if isinstance(obj, _lock_types()):
        return "lock", f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, socket.socket):
        return "socket", "socket"
    if isinstance(obj, threading.Thread):
        return "thread", f"thread {obj.name!r}"
    if isinstance(obj, types.ModuleType):
        return "module", f"module {obj.__name__!r}"
    module = type(obj).__module__ or ""
    qualname = f"{module}.{type(obj).__qualname__}"
    if (
        module.split(".")[0] in _HANDLE_MODULES
        or "connection" in type(obj).__name__.lower()
        or "cursor" in type(obj).__name__.lower()
    ):
        return "connection", f"{qualname} (a database or network handle)"
    return "object", qualname


FIXES = {
    "lambda": (
        "Replace the lambda with a module-level function or a callable class "
        "(functools.partial of a module-level function also pickles)."
    ),
    "local function": (
        "Move the nested function to module level, or turn it into a callable class that "
        "stores what it closes over as attributes."
    ),
    "function": (
        "Define the function in an importable module (not in a notebook or the __main__ of "
        "an interactive session)."
    ),
    "generator": (
        "Store what the generator is made from and create the generator in "
        "__iter__/__getitem__ inside the worker."
    ),
    "open file": (
        "Keep the path in __init__ and open the file lazily in each worker (on first "
        "__getitem__ or in worker_init_fn); drop the handle in __getstate__."
    ),
    "connection": (
        "Keep the connection parameters in __init__ and connect lazily in each worker (on "
        "first use or in worker_init_fn); drop the handle in __getstate__."
    ),
    "socket": (
        "Connect lazily in each worker instead of in __init__; drop the socket in __getstate__."
    ),
    "lock": (
        "Create the lock lazily inside each worker (or drop it in __getstate__); a lock "
        "cannot cross into another process."
    ),
    "thread": "Start the thread lazily inside each worker; drop it in __getstate__.",
    "module": "Import the module where it is used instead of storing it on the object.",
    "object": (
        "Make the object picklable (define __getstate__/__setstate__ that leave out the "
        "unpicklable part) or create it lazily in each worker."
    ),
    "import": (
        "Define the class in an importable module (not in a notebook or the __main__ "
        "script) so a fresh worker can import it, or keep using the fork start method."
    ),
}


# -- finding the culprits -------------------------------------------------------------


@dataclass
class Culprit(AsDict):
    path: str
    kind: str
    description: str
    error: str


def _children(obj: Any) -> list[tuple[str, Any]]:
    """The parts pickle would serialise, labelled as attribute paths."""
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, (set, frozenset)):
        return [(f"{{{i}}}", v) for i, v in enumerate(obj)]
    if isinstance(obj, partial):
        kids: list[tuple[str, Any]] = [(".func", obj.func)]
        kids += [(f".args[{i}]", a) for i, a in enumerate(obj.args)]
        kids += [(f".keywords[{k!r}]", v) for k, v in (obj.keywords or {}).items()]
        return kids
    if isinstance(obj, types.MethodType):
        return [(".__self__", obj.__self__), (".__func__", obj.__func__)]
    if isinstance(obj, (types.FunctionType, types.ModuleType, type, types.GeneratorType)):
        return []
    if isinstance(obj, types.BuiltinMethodType):
        owner = getattr(obj, "__self__", None)
        return (
            [] if owner is None or isinstance(owner, types.ModuleType) else [(".__self__", owner)]
        )
    try:
        reduced = obj.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    except Exception:
        return []
    if not isinstance(reduced, tuple):
        return []
    kids = []
    args = reduced[1] if len(reduced) > 1 else ()
    for i, arg in enumerate(args or ()):
        if not isinstance(arg, type):
            kids.append((f".<arg {i}>", arg))
    state = reduced[2] if len(reduced) > 2 else None
    if (
        isinstance(state, tuple)
        and len(state) == 2
        and all(s is None or isinstance(s, dict) for s in state)
    ):
        merged: dict[str, Any] = {}
        for part in state:
            merged.update(part or {})
        state = merged
    if isinstance(state, dict):
        kids += [
            (f".{k}" if isinstance(k, str) and k.isidentifier() else f"[{k!r}]", v)
            for k, v in state.items()
        ]
    elif state is not None:
        kids.append((".<state>", state))
    if len(reduced) > 3 and reduced[3] is not None:
        kids += [(f"[{i}]", v) for i, v in enumerate(reduced[3])]
    if len(reduced) > 4 and reduced[4] is not None:
        kids += [(f"[{k!r}]", v) for k, v in reduced[4]]
    return kids


class _Walker:
    def __init__(self, limit: int, seconds: float) -> None:
        self.limit = limit
        self.deadline = time.monotonic() + seconds
        self.failing: set[int] = set()
        self.ok: set[int] = set()
        self.culprits: list[Culprit] = []
        self.truncated = False

    def fails(self, obj: Any) -> BaseException | None:
        key = id(obj)
        if key in self.ok:
            return None
        error = try_pickle(obj)[0]
        if error is None:
            self.ok.add(key)
        return error

    def walk(self, obj: Any, path: str, error: BaseException | None = None, depth: int = 0) -> bool:
        """Record the innermost unpicklable objects under ``obj``; True when ``obj`` fails."""
        if id(obj) in self.failing:
            return True
        error = error if error is not None else self.fails(obj)
        if error is None:
            return False
        self.failing.add(id(obj))
        found = False
        if depth < 40 and time.monotonic() < self.deadline:
            for label, child in self._failing_children(obj):
                if len(self.culprits) >= self.limit:
                    self.truncated = True
                    break
                if self.walk(child, path + label, depth=depth + 1):
                    found = True
        if not found and len(self.culprits) < self.limit:
            kind, description = describe_object(obj)
            self.culprits.append(Culprit(path, kind, description, describe_exception(error, 160)))
        return True

    def _failing_children(self, obj: Any) -> list[tuple[str, Any]]:
        kids = _children(obj)
        if len(kids) <= _BISECT_ABOVE:
            return kids
        return self._bisect(kids)

    def _bisect(self, kids: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """The children of a long container that fail, found by pickling halves."""
        if len(kids) <= _BISECT_ABOVE:
            return [(label, child) for label, child in kids if self.fails(child) is not None]
        if time.monotonic() > self.deadline:
            return kids[:_BISECT_ABOVE]
        middle = len(kids) // 2
        out: list[tuple[str, Any]] = []
        for half in (kids[:middle], kids[middle:]):
            if try_pickle([child for _, child in half])[0] is not None:
                out += self._bisect(half)
        return out


def find_culprits(
    obj: Any, root: str, *, limit: int = _MAX_CULPRITS, seconds: float = _WALK_SECONDS
) -> list[Culprit]:
    """Attribute paths (``root.attr[2].fn``) of the objects that keep ``obj`` from pickling."""
    walker = _Walker(limit, seconds)
    walker.walk(obj, root)
    return walker.culprits


# -- the probe ---------------------------------------------------------------------------


@dataclass
class RootResult:
    """One object the spawn path pickles (``dataset``, ``collate_fn``, ``worker_init_fn``)."""

    name: str
    type: str
    ok: bool
    pickled_bytes: int = 0
    array_bytes: int = 0
    culprits: list[Culprit] = field(default_factory=list)
    load_error: str | None = None  # a fresh interpreter (as spawn starts) could not load it
    load_checked: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["culprits"] = [c.to_dict() for c in self.culprits]
        return data


class PicklingProbe:
    """Pickle each root now; load the pickles in a fresh interpreter in the background.

    ``start()`` returns quickly; ``finish(deadline)`` collects the fresh load's
    verdict (waiting at most until ``deadline``) and returns the probe's record.
    """

    def __init__(self, roots: dict[str, Any], workdir: Path, *, load_in_spawn: bool = True) -> None:
        self.roots = roots
        self.workdir = workdir
        self.load_in_spawn = load_in_spawn
        self.results: list[RootResult] = []
        self.process: Any = None
        self.out_path = workdir / "fresh-load.json"
        self.note: str | None = None

    def start(self) -> PicklingProbe:
        picklable: dict[str, Any] = {}
        fds_needed = 0
        array_bytes = 0
        for name, obj in self.roots.items():
            error, size, arrays, fds = try_pickle(obj)
            fds_needed += fds
            array_bytes += arrays
            result = RootResult(
                name=name,
                type=_type_name(obj),
                ok=error is None,
                pickled_bytes=size,
                array_bytes=arrays,
            )
            if error is not None:
                result.culprits = find_culprits(obj, name)
            else:
                picklable[name] = obj
            self.results.append(result)
        if not self.load_in_spawn or not picklable:
            return self
        if fds_needed:
            self.note = (
                "not checked: loading in a fresh interpreter (the objects carry open file "
                "descriptors)"
            )
            return self
        if array_bytes > FRESH_LOAD_MAX_ARRAY_BYTES:
            self.note = (
                "not checked: loading in a fresh interpreter (the objects hold "
                f"{array_bytes / 2**20:,.0f} MB of "
                "arrays, too much to copy for the probe)"
            )
            return self
        # The fresh interpreter loads the real objects, never the stand-ins (NOTE [probes on real
        # objects]).
        blobs: dict[str, bytes] = {}
        for name, obj in picklable.items():
            buffer = io.BytesIO()
            error = pickle_real(obj, buffer)
            if error is not None:
                self.note = (
                    f"not checked: loading {name} in a fresh interpreter (it pickles only through "
                    f"multiprocessing's reducers: {describe_exception(error, 120)})"
                )
                continue
            blobs[name] = buffer.getvalue()
        for name in [n for n, blob in blobs.items() if b"__main__" in blob]:
            # A spawned worker re-runs the __main__ script to find these; we will not run
            # the user's script behind their back, so that part is not verified.
            del blobs[name]
            self.note = (
                f"not checked: loading {name} in a fresh interpreter (it refers to objects "
                "defined in the __main__ script)"
            )
        if not blobs:
            return self
        in_path = self.workdir / "fresh-load.pkl"
        in_path.write_bytes(pickle.dumps(blobs))
        # A fresh interpreter with this process's sys.path: what a spawn/forkserver
        # worker starts from (without re-running the __main__ script).
        code = (
            "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
            "from stallscope.checks.pickling import load_pickles; "
            "load_pickles(sys.argv[2], sys.argv[3])"
        )
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    code,
                    json.dumps(sys.path),
                    str(in_path),
                    str(self.out_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            self.note = f"not checked: loading in a fresh interpreter (it could not start: {exc})"
        return self

    def finish(self, deadline: float) -> dict[str, Any]:
        if self.process is not None:
            try:
                _, stderr = self.process.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.cancel()
                self.note = (
                    "not checked: loading in a fresh interpreter (it did not finish within "
                    "the budget)"
                )
            else:
                self._read_load_results(stderr.decode(errors="replace"))
        return {
            "roots": [r.to_dict() for r in self.results],
            "note": self.note,
        }

    def cancel(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(Exception):
                self.process.communicate(timeout=2.0)

    def _read_load_results(self, stderr: str) -> None:
        try:
            verdicts = json.loads(self.out_path.read_text())
        except (OSError, ValueError):
            last = stderr.strip().splitlines()[-1:] or [""]
            self.note = (
                "not checked: loading in a fresh interpreter (it exited with code "
                f"{self.process.returncode} before reporting {last[0]})"
            )
            return
        for result in self.results:
            if result.name in verdicts:
                result.load_checked = True
                result.load_error = verdicts[result.name]


def load_pickles(in_path: str, out_path: str) -> None:
    """Runs in a fresh interpreter: unpickle each blob, report each error as one line."""
    with open(in_path, "rb") as handle:
        blobs = pickle.load(handle)
    verdicts: dict[str, str | None] = {}
    for name, blob in blobs.items():
        try:
            pickle.loads(blob)
            verdicts[name] = None
        except BaseException as exc:  # report anything, including SystemExit from a script's import
            verdicts[name] = describe_exception(exc, 200)
    Path(out_path).write_text(json.dumps(verdicts))
    sys.stdout.flush()


def _type_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"
