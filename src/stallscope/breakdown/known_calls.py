"""Read and decode found without markers: timing wrappers for well-known library calls.

Part of NOTE [stage timing] (``recorder.py``). In a worker the wrappers are installed
once, on the first sample, for the worker's life; in the main process only around a
run (``known_calls_timed``), and removed after it. Only modules the pipeline has
already imported are patched (nothing is imported here), and modules it imports later
are wrapped at the next sample. A wrapper does nothing but call the original when no
recorder is active.

What counts as what:

- Pillow: ``Image.open`` reads the whole file ("read"), header parsing and the lazy
  pixel decoding (``ImageFile.load``) are "decode".
- ``numpy.load``, ``torch.load``, ``numpy.fromfile``, ``wave.open`` and
  ``Wave_read.readframes``: "read". A memory map (``numpy.memmap``,
  ``numpy.load(mmap_mode=...)``) reads lazily, when its pages are first touched: indexing
  a memmap touches the pages of the slice it returns, as "read".
- Calls that read and decode in one go (``cv2.imread``, ``soundfile.read``,
  ``scipy.io.wavfile.read``, ``librosa.load``, ``torchaudio.load``, pandas' ``read_*``):
  the file is first read into the page cache as "read" (files up to
  ``PREFETCH_MAX_BYTES``), then the call itself, which finds the bytes in memory, is
  "decode". The result is the library's own.
- ``cv2.imdecode``: "decode".
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .recorder import _ACTIVE, DECODE, READ, StageRecorder

PREFETCH_MAX_BYTES = 64 << 20
_PAGE = 4096
_PANDAS_READERS = (
    "read_csv",
    "read_table",
    "read_json",
    "read_parquet",
    "read_feather",
    "read_orc",
    "read_pickle",
    "read_hdf",
    "read_excel",
    "read_sas",
    "read_stata",
    "read_spss",
)


class _KnownCalls:
    """Swaps the known calls (``_known_call_targets``) for timing wrappers, and back.
    Wrappers pass straight through when no recorder is active."""

    installed: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
    depth = 0
    modules_seen = 0  # len(sys.modules) at the last scan

    @classmethod
    def install(cls) -> None:
        if cls.depth == 0:
            cls.installed = []
            cls._wrap_new()
        cls.depth += 1

    @classmethod
    def refresh(cls) -> None:
        """Wrap the known calls of modules imported since the last scan (a dataset that
        imports cv2 inside ``__getitem__``)."""
        if cls.depth and len(sys.modules) != cls.modules_seen:
            cls._wrap_new()

    @classmethod
    def _wrap_new(cls) -> None:
        cls.modules_seen = len(sys.modules)
        for owner, attr, make in _known_call_targets():
            original = (
                owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            )
            if original is None or getattr(original, "__stallscope_wrapped__", False):
                continue
            wrapper = make(original)
            wrapper.__stallscope_wrapped__ = True
            setattr(owner, attr, wrapper)
            cls.installed.append((owner, attr, original))

    @classmethod
    def uninstall(cls) -> None:
        cls.depth = max(0, cls.depth - 1)
        if cls.depth == 0:
            for owner, attr, original in reversed(cls.installed):
                setattr(owner, attr, original)
            cls.installed = []


@contextlib.contextmanager
def known_calls_timed() -> Iterator[None]:
    _KnownCalls.install()
    try:
        yield
    finally:
        _KnownCalls.uninstall()


def _known_call_targets() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    targets: list[tuple[Any, str, Callable[[Any], Any]]] = []
    image = sys.modules.get("PIL.Image")
    if image is not None:
        targets.append((image, "open", _wrap_image_open))
        # ImageFile.load decodes pixels lazily; plugins that override load usually call it,
        # the ones that do not are wrapped themselves (a nested "decode" counts once).
        for plugin in {
            factory
            for factory, _ in getattr(image, "OPEN", {}).values()
            if isinstance(factory, type)
        }:
            if "load" in plugin.__dict__:
                targets.append((plugin, "load", _wrap_decode_method))
    image_file = sys.modules.get("PIL.ImageFile")
    if image_file is not None:
        targets.append((image_file.ImageFile, "load", _wrap_decode_method))
    for module_name, attr, make in _LIBRARY_CALLS:
        module = sys.modules.get(module_name)
        owner: Any = module
        for part in attr.split(".")[:-1]:  # "memmap.__getitem__": a method of a class
            owner = getattr(owner, part, None)
        name = attr.rsplit(".", 1)[-1]
        if owner is not None and callable(getattr(owner, name, None)):
            targets.append((owner, name, make))
    return targets


def _wrap_image_open(original: Callable[..., Any]) -> Callable[..., Any]:
    def open_timed(fp: Any, mode: str = "r", formats: Any = None, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None or mode != "r":
            return original(fp, mode, formats, **kwargs)
        data, path = _read_whole_file(fp, recorder)
        recorder.push(DECODE)
        try:
            image = original(io.BytesIO(data) if data is not None else fp, mode, formats, **kwargs)
        finally:
            recorder.pop()
        if path is not None:
            with contextlib.suppress(Exception):
                image.filename = path
        return image

    return open_timed


def _read_whole_file(fp: Any, recorder: StageRecorder) -> tuple[bytes | None, str | None]:
    """Read an image file's bytes as the "read" stage; Pillow would otherwise read it lazily
    inside decoding, mixing storage time into decode time."""
    if isinstance(fp, (str, bytes, os.PathLike)):
        path = os.fsdecode(fp)
        recorder.push(READ)
        try:
            with builtins.open(path, "rb") as handle:
                return handle.read(), path
        finally:
            recorder.pop()
    fileno = getattr(fp, "fileno", None)
    if fileno is None or not hasattr(fp, "read"):
        return None, None
    try:
        fileno()  # BytesIO and friends raise: already in memory, nothing to read
        position = fp.tell()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None, None
    recorder.push(READ)
    try:
        fp.seek(0)  # Image.open reads from the start too
        data = fp.read()
    finally:
        recorder.pop()
    with contextlib.suppress(OSError, ValueError):
        fp.seek(position)
    return data, None


def _wrap_decode_method(original: Callable[..., Any]) -> Callable[..., Any]:
    def load_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        # Pillow calls load() before every operation; only a pending decode (tiles) is a stage.
        if recorder is None or not getattr(self, "tile", None):
            return original(self, *args, **kwargs)
        recorder.push(DECODE)
        try:
            return original(self, *args, **kwargs)
        finally:
            recorder.pop()

    return load_timed


def _prefetch_file(source: Any, recorder: StageRecorder) -> None:
    """Read a file named by ``source`` into the page cache, timed as "read"."""
    if not isinstance(source, (str, bytes, os.PathLike)):
        return
    try:
        path = os.fsdecode(source)
        if not os.path.isfile(path) or os.path.getsize(path) > PREFETCH_MAX_BYTES:
            return
        recorder.push(READ)
        try:
            with builtins.open(path, "rb", buffering=0) as handle:
                while handle.read(1 << 20):
                    pass
        finally:
            recorder.pop()
    except (OSError, ValueError, TypeError):
        return  # the library reports a missing file in its own way


def _timed_as(
    stage: str, *, prefetch: bool = False, after: Callable[[Any], None] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper factory: the call timed as ``stage``. ``prefetch``: the file named by its
    first argument is read into the page cache first, as "read"; ``after(result)`` runs
    inside the stage (a memory map's pages touched)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            recorder = _ACTIVE.get()
            if recorder is None:
                return original(*args, **kwargs)
            if prefetch:
                _prefetch_file(args[0] if args else next(iter(kwargs.values()), None), recorder)
            recorder.push(stage)
            try:
                result = original(*args, **kwargs)
                if after is not None:
                    after(result)
                return result
            finally:
                recorder.pop()

        return timed

    return make


def _touch_pages(array: Any) -> None:
    """Read one byte of every page a contiguous slice of a memory map spans, so the page
    faults (the reading from storage) happen now; the data is left as it is."""
    import numpy as np

    if not isinstance(array, np.ndarray) or array.size == 0:
        return
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        return  # a strided view: its pages are read where it is used
    plain = array.view(np.ndarray)  # a plain view: indexing it must not come back here
    flat = plain.ravel(order="K").view(np.uint8)
    int(flat[::_PAGE].max())


_read = _timed_as(READ)
_read_then_decode = _timed_as(DECODE, prefetch=True)

# (module, attribute, wrapper factory) for the calls named in the module docstring.
_LIBRARY_CALLS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("numpy", "load", _read),
    ("torch", "load", _read),
    ("numpy", "fromfile", _read),
    ("numpy", "memmap.__getitem__", _timed_as(READ, after=_touch_pages)),
    ("wave", "open", _read),
    ("wave", "Wave_read.readframes", _read),
    ("cv2", "imread", _read_then_decode),
    ("cv2", "imreadmulti", _read_then_decode),
    ("cv2", "imdecode", _timed_as(DECODE)),
    ("soundfile", "read", _read_then_decode),
    ("scipy.io.wavfile", "read", _read_then_decode),
    ("librosa", "load", _read_then_decode),
    ("torchaudio", "load", _read_then_decode),
    *(("pandas", reader, _read_then_decode) for reader in _PANDAS_READERS),
]
