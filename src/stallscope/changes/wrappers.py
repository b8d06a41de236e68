"""What the probes put around the user's dataset (never into their files): module-level classes,
so that worker processes under every start method can unpickle them.

* :class:`SharedPrefixCache` — the output of the deterministic prefix per index, one pickle file
  per index in a folder on ``/dev/shm`` (memory every worker shares) or on local disk. The same
  class, as text (:data:`PREFIX_CACHE_SOURCE`), is what the prefix-cache diff adds to the user's
  module, so the code printed is the code measured.
* :class:`PrefixCachedDataset` — serves an item from the cache (prefix output + the rest of the
  item), running only the stages after the prefix; on a miss runs the user's item and fills it.
* :class:`ReducedDecodeDataset` — the user's item with Pillow's ``Image.open`` (and OpenCV's
  ``imread``/``imdecode``) patched, during that call only, to decode JPEGs at 1/2, 1/4 or 1/8 size.
* :class:`Uint8Layout`, :class:`AffineBatch`, :class:`BatchStages` — the integer-transfer worker
  stage and the per-batch steps run in the main process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .anatomy import get_slot, run_stages, set_slot

PREFIX_CACHE_SOURCE = '''
class SharedPrefixCache:
    """The deterministic part of each item, one file per index, shared by all workers.

    Delete the folder when the data or the cached transforms change."""

    def __init__(self, folder):
        self.folder = folder

    def get(self, index):
        import os, pickle
        try:
            with open(os.path.join(self.folder, f"{index}.pkl"), "rb") as handle:
                return pickle.load(handle)
        except FileNotFoundError:
            return None

    def put(self, index, value):
        import os, pickle
        os.makedirs(self.folder, exist_ok=True)
        temporary = os.path.join(self.folder, f"{index}.{os.getpid()}.tmp")
        with open(temporary, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, os.path.join(self.folder, f"{index}.pkl"))
        return value
'''

_namespace: dict[str, Any] = {}
exec(compile(PREFIX_CACHE_SOURCE, __file__ + ":PREFIX_CACHE_SOURCE", "exec"), _namespace)  # noqa: S102 - our own text


_PrintedCache: Any = _namespace["SharedPrefixCache"]


# The base class is built by exec from the printed source above, so mypy sees only Any.
class SharedPrefixCache(_PrintedCache):  # type: ignore[misc]
    """:data:`PREFIX_CACHE_SOURCE`'s class, importable by workers (see the module docstring)."""

    def __len__(self) -> int:
        try:
            return sum(1 for name in os.listdir(self.folder) if name.endswith(".pkl"))
        except FileNotFoundError:
            return 0

    def nbytes(self) -> int:
        try:
            return sum(e.stat().st_size for e in os.scandir(self.folder) if e.name.endswith(".pkl"))
        except FileNotFoundError:
            return 0


class PrefixCachedDataset:
    """The user's items with the output of their deterministic prefix kept in a
    :class:`SharedPrefixCache`.

    ``filling`` is the user's dataset with its Compose split (prefix, then a sink, then the rest);
    a hit needs none of it: the rest of the item (a label, say) is cached with the prefix output.
    """

    def __init__(
        self, dataset: Any, splitter: PrefixSplit, slot: tuple[Any, ...], cache: SharedPrefixCache
    ) -> None:
        self.dataset = dataset
        self.splitter = splitter
        self.slot = slot
        self.cache = cache

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        hit = self.cache.get(index)
        if hit is not None:
            value, rest = hit
            return set_slot(rest, self.slot, run_stages(self.splitter.suffix, value))
        key = threading.get_ident()  # worker threads of one process share the splitter
        self.splitter.caught.pop(key, None)
        item = self.dataset[index]
        if key in self.splitter.caught:
            self.cache.put(index, (self.splitter.caught.pop(key), set_slot(item, self.slot, None)))
        return item


class PrefixSplit:
    """The user's Compose as prefix → (kept aside) → suffix."""

    def __init__(self, prefix: Sequence[Any], suffix: Sequence[Any]) -> None:
        self.prefix = list(prefix)
        self.suffix = list(suffix)
        self.transforms = self.prefix + self.suffix  # stays a Compose to anything that looks
        self.caught: dict[int, Any] = {}

    def __call__(self, value: Any) -> Any:
        value = run_stages(self.prefix, value)
        self.caught[threading.get_ident()] = value
        return run_stages(self.suffix, value)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["caught"] = {}
        return state


# -- reduced-size decode ---------------------------------------------------------------------

_REDUCED_FLAGS = {
    2: "IMREAD_REDUCED_COLOR_2",
    4: "IMREAD_REDUCED_COLOR_4",
    8: "IMREAD_REDUCED_COLOR_8",
}


@contextlib.contextmanager
def reduced_decode(factor: int, calls: list[int] | None = None) -> Iterator[None]:
    """Inside: Pillow opens JPEGs in draft mode at 1/``factor`` size, OpenCV reads colour images
    reduced."""
    from PIL import Image

    original_open = Image.open

    def open_reduced(*args: Any, **kwargs: Any) -> Any:
        image = original_open(*args, **kwargs)
        if getattr(image, "format", None) == "JPEG":
            image.draft("RGB", (image.width // factor, image.height // factor))
            if calls is not None:
                calls.append(1)
        return image

    Image.open = open_reduced
    patched_cv2: list[tuple[Any, str, Any]] = []
    cv2 = _cv2()
    if cv2 is not None:
        flag = getattr(cv2, _REDUCED_FLAGS[factor])
        for name in ("imread", "imdecode"):
            original = getattr(cv2, name)

            def reduced(
                *args: Any, _original: Any = original, _name: str = name, **kwargs: Any
            ) -> Any:
                flags = kwargs.get("flags", args[1] if len(args) > 1 else cv2.IMREAD_COLOR)
                if flags == cv2.IMREAD_COLOR:
                    args = (args[0], flag)
                    kwargs.pop("flags", None)
                    if calls is not None:
                        calls.append(1)
                return _original(*args, **kwargs)

            setattr(cv2, name, reduced)
            patched_cv2.append((cv2, name, original))
    try:
        yield
    finally:
        Image.open = original_open
        for module, name, original in patched_cv2:
            setattr(module, name, original)


def _cv2() -> Any:
    import sys

    return sys.modules.get("cv2")  # only where the user's code already imported it


class ReducedDecodeDataset:
    def __init__(self, dataset: Any, factor: int) -> None:
        self.dataset = dataset
        self.factor = factor

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        with reduced_decode(self.factor):
            return self.dataset[index]


# -- integer transfer and batch-level stages --------------------------------------------------


class Uint8Layout:
    """The worker's last stage under integer transfer: the image as a uint8 tensor in the layout
    the user's float conversion produced (CHW from an HWC image)."""

    def __init__(self, permute: tuple[int, ...] | None) -> None:
        self.permute = permute

    def __call__(self, value: Any) -> Any:
        import torch

        array = np.array(value, dtype=np.uint8, copy=True)
        tensor = torch.from_numpy(array)
        return tensor.permute(*self.permute).contiguous() if self.permute else tensor

    def __repr__(self) -> str:
        return "Uint8Layout()"


class AffineBatch:
    """Main-process step: ``batch[slot] = uint8 batch × scale + shift`` per channel, in float32."""

    def __init__(
        self,
        slot: tuple[Any, ...],
        scale: Sequence[float],
        shift: Sequence[float],
        channel_dim: int,
    ) -> None:
        self.slot = slot
        self.scale = list(scale)
        self.shift = list(shift)
        self.channel_dim = channel_dim  # in the per-sample tensor; +1 in the batch

    def __call__(self, batch: Any) -> Any:
        import torch

        images = get_slot(batch, self.slot)
        shape = [1] * images.dim()
        shape[self.channel_dim + 1] = len(self.scale)
        scale = torch.tensor(self.scale, dtype=torch.float32, device=images.device).view(shape)
        shift = torch.tensor(self.shift, dtype=torch.float32, device=images.device).view(shape)
        return set_slot(batch, self.slot, images.float().mul_(scale).add_(shift))


class BatchStages:
    """Main-process step: the user's own tensor stages applied to the whole batch."""

    def __init__(self, slot: tuple[Any, ...], stages: Sequence[Any]) -> None:
        self.slot = slot
        self.stages = list(stages)

    def __call__(self, batch: Any) -> Any:
        return set_slot(batch, self.slot, run_stages(self.stages, get_slot(batch, self.slot)))


def dump_size(value: Any) -> int:
    return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


# -- a patched __getitem__ (inline datasets) ---------------------------------------------------


class PatchedMethodDataset:
    """The user's dataset with ``__getitem__`` replaced by the patched method's text (the code the
    diff prints), compiled in a copy of the namespace of the user's module, with the prefix cache
    of ``cache_folder``. Workers rebuild the method after unpickling (it is kept as text)."""

    def __init__(
        self,
        dataset: Any,
        module: str,
        source: str,
        filename: str,
        cache_folder: str,
        helpers: str = "",
    ) -> None:
        self.helpers = helpers  # module-level code the patched method calls
        self.dataset = dataset
        self.module = module
        self.source = source
        self.filename = filename
        self.cache_folder = cache_folder
        self._getitem: Any = None

    def _build(self) -> Any:
        import importlib
        import sys

        base = sys.modules.get(self.module) or importlib.import_module(self.module)
        namespace = dict(vars(base))
        namespace["SharedPrefixCache"] = SharedPrefixCache
        namespace["_PREFIX_CACHE"] = SharedPrefixCache(self.cache_folder)
        if self.helpers:
            exec(compile(self.helpers, self.filename, "exec"), namespace)  # noqa: S102 - ours
        exec(compile(self.source, self.filename, "exec"), namespace)  # noqa: S102 - the user's method, patched
        return namespace["__getitem__"]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if self._getitem is None:
            self._getitem = self._build()
        return self._getitem(self.dataset, index)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_getitem"] = None
        return state
