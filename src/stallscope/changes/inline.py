"""The anatomy of a dataset that does its work inline in ``__getitem__`` (no transform list).

NOTE [inline prefix]
Most hand-written datasets read, decode and augment in ``__getitem__`` itself:
``Image.open(path)`` → ``np.asarray(...)`` → a random crop with ``np.random`` → normalise →
``torch.from_numpy``. The part that is the same every epoch is the run of top-level statements
before the first one that draws random numbers. That statement is found at run time, not from
names: ``__getitem__`` runs for a few items under a line tracer (``sys.settrace``, for its own
frame only) and a profile hook (``sys.setprofile``, for the calls it makes); at every line
boundary the state of each random number generator it can reach is compared with the state at the
previous boundary: Python's ``random``, NumPy's legacy global generator, torch's default
generator, and every ``random.Random``, ``numpy.random.Generator``/``RandomState`` and
``torch.Generator`` reachable from the dataset (an albumentations ``Compose`` holds one per
transform) or held in a local variable. A statement whose run moved any of them draws random
numbers; a statement that creates a generator ends the prefix too (a cached generator would
replay the same draws every epoch). Lines inside a compound statement (the body of an ``if``)
count for the top-level statement that holds them.

The calls the profile hook sees are matched against the read, decode and resize calls this module
knows (PIL ``Image.open``/``convert``/``load``/``resize``, ``cv2.imread``/``imdecode``/``resize``,
file reads, ``np.load``), which names the prefix ("read + decode: Image.open, Image.convert") and
tells the reduced-size decode where the decode and the first shrink are. What the prefix produces
is the set of variables it assigns that the rest of the method reads; the values they hold at the
first random statement are what a cache keeps (``inline_changes``).
"""

from __future__ import annotations

import ast
import copy
import inspect
import random
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .anatomy import NotApplicable, replaced, seeded
from .source import SourceFile, source_file

# (module, qualified name) of calls, as the profile hook names them.
READ_CALLS = {
    ("io", "open"),
    ("_io", "open"),
    ("builtins", "open"),
    ("pathlib", "Path.read_bytes"),
    ("numpy", "load"),
    ("numpy", "fromfile"),
    ("torch.serialization", "load"),
}
DECODE_CALLS = {
    ("PIL.Image", "open"),
    ("PIL.Image", "Image.convert"),
    ("PIL.ImageFile", "ImageFile.load"),
    ("cv2", "imread"),
    ("cv2", "imdecode"),
    ("simplejpeg", "decode_jpeg"),
}
JPEG_DECODE_CALLS = {("PIL.Image", "open"), ("cv2", "imread"), ("cv2", "imdecode")}
SHORT = {
    ("PIL.Image", "open"): "Image.open",
    ("PIL.Image", "Image.convert"): "Image.convert",
    ("PIL.ImageFile", "ImageFile.load"): "ImageFile.load",
    ("cv2", "imread"): "cv2.imread",
    ("cv2", "imdecode"): "cv2.imdecode",
    ("simplejpeg", "decode_jpeg"): "simplejpeg.decode_jpeg",
    ("PIL.Image", "Image.resize"): "Image.resize",
    ("PIL.Image", "Image.thumbnail"): "Image.thumbnail",
    ("PIL.Image", "Image.reduce"): "Image.reduce",
    ("cv2", "resize"): "cv2.resize",
}
SAMPLES = 3  # items traced
REACH_DEPTH = 4  # dataset → Compose → transforms list → transform → its generator
REACH_LIMIT = 4000  # objects visited at most while looking for generators


def is_rng(value: Any) -> bool:
    if isinstance(value, (random.Random, np.random.Generator, np.random.RandomState)):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Generator)


def rng_state(value: Any) -> Any:
    """Something equal before and after exactly when the generator drew nothing."""
    if isinstance(value, random.Random):
        return value.getstate()
    if isinstance(value, np.random.Generator):
        return repr(value.bit_generator.state)
    if isinstance(value, np.random.RandomState):
        state: Any = value.get_state()
        return state[1].tobytes(), state[2]
    return bytes(value.get_state().numpy().tobytes())


def global_rngs() -> dict[str, Any]:
    import torch

    return {
        "random": random._inst,  # the module-level functions' generator
        "np.random": np.random.mtrand._rand,
        "torch": torch.default_generator,
    }


def reachable_rngs(root: Any, name: str = "self") -> dict[str, Any]:
    """Generators reachable from ``root`` through attributes, lists and dicts (bounded)."""
    found: dict[str, Any] = {}
    seen: set[int] = set()

    def walk(value: Any, path: str, depth: int) -> None:
        if id(value) in seen or len(seen) > REACH_LIMIT:
            return
        seen.add(id(value))
        if is_rng(value):
            found.setdefault(path, value)
            return
        if depth == 0 or isinstance(value, (str, bytes, int, float, np.ndarray, type)):
            return
        if isinstance(value, (list, tuple)):
            for i, child in enumerate(value[:64]):
                walk(child, f"{path}[{i}]", depth - 1)
        elif isinstance(value, dict):
            for key, child in list(value.items())[:64]:
                walk(child, f"{path}[{key!r}]", depth - 1)
        elif hasattr(value, "__dict__") and not inspect.ismodule(value):
            try:
                attributes = list(vars(value).items())
            except TypeError:
                return
            for key, child in attributes[:64]:
                walk(child, f"{path}.{key}", depth - 1)

    walk(root, name, REACH_DEPTH)
    return found


def known_builtins() -> dict[int, tuple[str, str]]:
    """C functions that carry no module name (OpenCV's), by identity."""
    found: dict[int, tuple[str, str]] = {}
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        for name in ("imread", "imdecode", "resize"):
            if hasattr(cv2, name):
                found[id(getattr(cv2, name))] = ("cv2", name)
    return found


def call_name(
    event: str, frame: Any, arg: Any, builtins: dict[int, tuple[str, str]] | None = None
) -> tuple[str, str] | None:
    if event == "c_call" and builtins and id(arg) in builtins:
        return builtins[id(arg)]
    if event == "call":
        code = frame.f_code
        return str(frame.f_globals.get("__name__", "")), getattr(code, "co_qualname", code.co_name)
    if event == "c_call":
        owner = getattr(arg, "__self__", None)
        module = getattr(arg, "__module__", None)
        if module is None and inspect.ismodule(owner):
            module = owner.__name__
        qualname = getattr(arg, "__qualname__", None) or getattr(arg, "__name__", "")
        return str(module or ""), str(qualname)
    return None


def image_size(value: Any) -> tuple[int, int] | None:
    """(height, width) of a PIL image or an H×W(×C) array of at least 8×8 pixels."""
    if hasattr(value, "getbands") and hasattr(value, "size"):
        return int(value.size[1]), int(value.size[0])
    if isinstance(value, np.ndarray) and value.ndim in (2, 3) and min(value.shape[:2]) >= 8:
        if value.ndim == 3 and value.shape[2] not in (1, 3, 4):
            return None
        return int(value.shape[0]), int(value.shape[1])
    return None


def snapshot(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "clone"):
        return value.clone()
    if hasattr(value, "getbands") and hasattr(value, "copy"):
        return value.copy()
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


@dataclass
class Statement:
    index: int
    first: int  # file line numbers, 1-based, inclusive
    last: int
    stores: set[str]
    loads: set[str]
    text: str  # the first line, stripped (for messages)
    is_return: bool


@dataclass
class ItemTrace:
    draws: dict[int, set[str]] = field(default_factory=dict)  # statement → generators moved
    creates_rng: set[int] = field(default_factory=set)
    calls: dict[int, set[tuple[str, str]]] = field(default_factory=dict)
    sizes: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    values: dict[int, dict[str, Any]] = field(default_factory=dict)  # image-likes stored
    at_cut: dict[str, Any] | None = None  # locals when the cut statement starts
    # statement → (input size, output size, what was called, the output) of each resize
    shrinks: dict[int, list[tuple[Any, Any, str, Any]]] = field(default_factory=dict)
    item: Any = None


@dataclass
class InlineAnatomy:
    dataset: Any
    cls: type  # the class whose __getitem__ runs
    source: SourceFile
    function: ast.FunctionDef
    statements: list[Statement]
    index_param: str
    first_random: int  # statement index; len(statements) when none draws
    random_by: str | None  # which generator the first random statement moved
    live: list[str]  # assigned in the prefix, read after it
    traces: list[ItemTrace]
    indices: list[int]
    seconds_per_sample: float
    memo: dict[Any, Any] = field(default_factory=dict)
    # the same fields the Compose anatomy has, where the shared checks read them
    item_slot: tuple[Any, ...] | None = None

    @property
    def prefix(self) -> list[Statement]:
        return self.statements[: self.first_random]

    def calls_in(self, statements: list[Statement]) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for trace in self.traces:
            for s in statements:
                out |= trace.calls.get(s.index, set())
        return out

    def prefix_label(self) -> str:
        calls = self.calls_in(self.prefix)
        reads = sorted(SHORT.get(c, c[1]) for c in calls & READ_CALLS)
        decodes = sorted({SHORT.get(c, c[1]) for c in calls & DECODE_CALLS})
        shrinks = sorted(
            {
                entry[2]
                for t in self.traces
                for s in self.prefix
                for entry in t.shrinks.get(s.index, [])
            }
        )
        parts = []
        if reads:
            parts.append("read")
        if decodes:
            parts.append("decode (" + ", ".join(decodes) + ")")
        if shrinks:
            parts.append("resize (" + ", ".join(shrinks) + ")")
        lines = f"lines {self.prefix[0].first}-{self.prefix[-1].last}" if self.prefix else ""
        return " + ".join(parts or ["the statements"]) + (f", {lines}" if lines else "")

    def first_random_text(self) -> str:
        if self.first_random >= len(self.statements):
            return "no statement draws random numbers"
        s = self.statements[self.first_random]
        by = f" ({self.random_by})" if self.random_by else ""
        return f"line {s.first}: `{s.text}`{by}"


def _statements(source: SourceFile, func: Any) -> tuple[ast.FunctionDef, list[Statement], str]:
    lines, start = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise NotApplicable("__getitem__ is not a plain function")
    ast.increment_lineno(tree, start - 1)
    args = [a.arg for a in node.args.posonlyargs + node.args.args]
    if len(args) < 2:
        raise NotApplicable("__getitem__ takes no index parameter")
    body = list(node.body)
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # the docstring
    file_lines = source.lines
    out = []
    for i, stmt in enumerate(body):
        stores = {
            n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        loads = {
            n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
        out.append(
            Statement(
                i,
                first,
                stmt.end_lineno or stmt.lineno,
                stores,
                loads,
                file_lines[stmt.lineno - 1].strip(),
                isinstance(stmt, ast.Return),
            )
        )
    return node, out, args[1]


class _Tracer:
    """Runs one item under the line tracer and the profile hook (see the NOTE)."""

    def __init__(
        self,
        code: Any,
        statements: list[Statement],
        rngs: dict[str, Any],
        cut: int | None,
        keep_values: bool,
    ) -> None:
        self.code = code
        self.rngs = rngs
        self.cut = cut
        self.keep_values = keep_values
        self.by_line: dict[int, int] = {}
        for s in statements:
            for line in range(s.first, s.last + 1):
                self.by_line[line] = s.index
        self.trace = ItemTrace()
        self.frame: Any = None
        self.current: int | None = None  # statement now running
        self.states: dict[str, Any] = {}
        self.local_rngs: dict[int, str] = {}
        self.builtins = known_builtins()

    def _states(self, frame: Any) -> dict[str, Any]:
        states = {name: rng_state(g) for name, g in self.rngs.items()}
        for key, value in list(frame.f_locals.items()):
            if is_rng(value):
                if id(value) not in self.local_rngs and self.current is not None:
                    self.trace.creates_rng.add(self.current)
                self.local_rngs[id(value)] = key
                states[f"local {key}"] = rng_state(value)
        return states

    def _boundary(self, frame: Any, next_statement: int | None) -> None:
        states = self._states(frame)
        if self.current is not None:
            moved = {k for k, v in states.items() if k in self.states and self.states[k] != v}
            if moved:
                self.trace.draws.setdefault(self.current, set()).update(moved)
            for name, value in list(frame.f_locals.items()):
                size = image_size(value)
                if size is not None:
                    self.trace.sizes.setdefault(self.current, {})[name] = size
                    if self.keep_values:
                        self.trace.values.setdefault(self.current, {})[name] = snapshot(value)
        if (
            self.cut is not None
            and self.trace.at_cut is None
            and (next_statement is None or next_statement >= self.cut)
        ):
            self.trace.at_cut = {k: snapshot(v) for k, v in frame.f_locals.items()}
        self.states = states
        self.current = next_statement

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            statement = self.by_line.get(frame.f_lineno)
            if statement is not None and statement != self.current:
                self._boundary(frame, statement)
        elif event == "return" and frame is self.frame:
            self._boundary(frame, None)
        return self.local

    def global_(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is self.code and self.frame is None:
            self.frame = frame
            self.states = self._states(frame)
            return self.local
        return None

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.current is None or self.frame is None or frame is self.frame and event == "call":
            return
        name = call_name(event, frame, arg, self.builtins)
        if name is not None:
            self.trace.calls.setdefault(self.current, set()).add(name)

    def record_shrink(self, label: str, source: Any, out: Any) -> None:
        if self.current is not None:
            entry = (image_size(source), image_size(out), label, snapshot(out))
            self.trace.shrinks.setdefault(self.current, []).append(entry)

    def run(self, dataset: Any, index: int) -> ItemTrace:
        old_trace, old_profile = sys.gettrace(), sys.getprofile()
        with replaced(resize_watchers(self.record_shrink)):
            sys.settrace(self.global_)
            sys.setprofile(self.profile)
            try:
                self.trace.item = dataset[index]
            finally:
                sys.settrace(old_trace)
                sys.setprofile(old_profile)
        if self.frame is None:
            raise NotApplicable("the dataset's __getitem__ did not run when an item was fetched")
        return self.trace


def resize_watchers(record: Callable[[str, Any, Any], None]) -> list[tuple[Any, str, Any]]:
    """Wrappers of the resize calls of Pillow and OpenCV (where already imported) that each call
    ``record(what, input, output)``, as :func:`~.anatomy.replaced` takes them."""
    targets: list[tuple[Any, str, str]] = []
    pil = sys.modules.get("PIL.Image")
    if pil is not None:
        targets += [(pil.Image, "resize", "Image.resize"), (pil.Image, "reduce", "Image.reduce")]
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and hasattr(cv2, "resize"):
        targets.append((cv2, "resize", "cv2.resize"))
    wrappers = []
    for owner, name, label in targets:
        original = getattr(owner, name)

        def wrapper(*args: Any, _original: Any = original, _label: str = label, **kw: Any) -> Any:
            out = _original(*args, **kw)
            record(_label, args[0] if args else None, out)
            return out

        wrappers.append((owner, name, wrapper))
    return wrappers


def decoded_sizes(dataset: Any, index: int) -> list[tuple[int, int]]:
    """(height, width) of each image Pillow loads or OpenCV decodes while ``dataset[index]``
    runs."""
    seen: list[tuple[int, int]] = []
    wrappers: list[tuple[Any, str, Any]] = []
    image_file = sys.modules.get("PIL.ImageFile")
    if image_file is not None:
        load = image_file.ImageFile.load

        def loading(image: Any, *args: Any, **kw: Any) -> Any:
            out = load(image, *args, **kw)
            seen.append((int(image.size[1]), int(image.size[0])))
            return out

        wrappers.append((image_file.ImageFile, "load", loading))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        for name in ("imread", "imdecode"):
            original = getattr(cv2, name)

            def decoding(*args: Any, _original: Any = original, **kw: Any) -> Any:
                out = _original(*args, **kw)
                if image_size(out) is not None:
                    seen.append(image_size(out))  # type: ignore[arg-type]
                return out

            wrappers.append((cv2, name, decoding))
    with replaced(wrappers), seeded(0):
        dataset[index]
    return seen


def trace_item(
    dataset: Any,
    cls: type,
    statements: list[Statement],
    index: int,
    *,
    seed: int = 0,
    cut: int | None = None,
    keep_values: bool = False,
) -> ItemTrace:
    """One item of ``dataset`` under the tracer, seeded."""
    rngs = {**global_rngs(), **reachable_rngs(dataset)}
    code = cls.__dict__["__getitem__"].__code__
    with seeded(seed):
        return _Tracer(code, statements, rngs, cut, keep_values).run(dataset, index)


def getitem_class(dataset: Any) -> type:
    for klass in type(dataset).__mro__:
        if "__getitem__" in vars(klass):
            func = vars(klass)["__getitem__"]
            if not inspect.isfunction(func):
                break
            return klass
    raise NotApplicable(
        f"{type(dataset).__name__}.__getitem__ is not Python code stallscope can read"
    )


def examine_inline(dataset: Any, *, items: int = SAMPLES) -> InlineAnatomy:
    """The anatomy of a map-style dataset that does its work in ``__getitem__`` (raises
    NotApplicable with one sentence)."""
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise NotApplicable("the dataset is not map-style (no __getitem__ and __len__)")
    length = len(dataset)
    if length == 0:
        raise NotApplicable("the dataset is empty")
    cls = getitem_class(dataset)
    module = getattr(cls, "__module__", "") or ""
    if module.startswith(("torch.", "stallscope.")):
        raise NotApplicable(f"{cls.__name__} is a library's dataset, not code of yours to change")
    source = source_file(cls)
    if source is None:
        raise NotApplicable(f"the source file of {cls.__name__} could not be read")
    if {"site-packages", "dist-packages"} & set(source.path.parts):
        raise NotApplicable(
            f"{cls.__name__} comes from an installed package ({module}), not code of yours to "
            "change"
        )
    try:
        function, statements, index_param = _statements(source, cls.__dict__["__getitem__"])
    except (OSError, TypeError, SyntaxError) as exc:
        raise NotApplicable(f"the source of {cls.__name__}.__getitem__ could not be read") from exc
    step = max(1, length // max(1, items))
    indices = [(n * step) % length for n in range(min(items, length))]
    traces = [trace_item(dataset, cls, statements, i, seed=11 + n) for n, i in enumerate(indices)]
    first_random, random_by = len(statements), None
    for s in statements:
        drawn = set().union(*(t.draws.get(s.index, set()) for t in traces))
        created = any(s.index in t.creates_rng for t in traces)
        if drawn or created or s.is_return:
            first_random = s.index
            if drawn:
                random_by = ", ".join(sorted(drawn)) + " drew"
            elif created:
                random_by = "creates a random number generator"
            break
    later = set().union(*(s.loads for s in statements[first_random:]))
    assigned: list[str] = []
    for s in statements[:first_random]:
        assigned += [n for n in sorted(s.stores) if n not in assigned]
    live = [n for n in assigned if n in later]
    walls = []
    for i in indices:
        start = time.perf_counter()
        dataset[i]
        walls.append(time.perf_counter() - start)
    anatomy = InlineAnatomy(
        dataset=dataset,
        cls=cls,
        source=source,
        function=function,
        statements=statements,
        index_param=index_param,
        first_random=first_random,
        random_by=random_by,
        live=live,
        traces=traces,
        indices=indices,
        seconds_per_sample=min(walls),
    )
    return anatomy


def prefix_values(anatomy: InlineAnatomy, index: int, seed: int = 0) -> dict[str, Any]:
    """The live variables' values when the first random statement starts, for ``index``."""
    trace = trace_item(
        anatomy.dataset, anatomy.cls, anatomy.statements, index, seed=seed, cut=anatomy.first_random
    )
    at = trace.at_cut or {}
    missing = [n for n in anatomy.live if n not in at]
    if missing:
        raise NotApplicable(
            f"{', '.join(missing)} had no value where the first random statement starts"
        )
    return {n: at[n] for n in anatomy.live}
