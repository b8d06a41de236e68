"""GPU utilisation and memory through NVML (nvidia-ml-py's ``pynvml``), optional.

:func:`open_gpu_monitor` returns an :class:`NvmlGpuMonitor` when NVML can be
loaded and a CUDA device is visible, and a :class:`NullGpuMonitor` otherwise
(no driver, no GPU, no ``pynvml``): callers sample either one the same way and
never branch on "is there a GPU".

NVML numbers devices physically, ignoring ``CUDA_VISIBLE_DEVICES``; torch numbers
them after that mask. The device torch uses is therefore looked up by UUID
where torch exposes it, and by index only as a fallback.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass
class GpuSample:
    """One NVML reading: utilisation over NVML's last sample period, memory now."""

    util_percent: float
    memory_used_mb: float
    memory_total_mb: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class GpuMonitor(Protocol):
    available: bool
    name: str | None
    reason: str | None

    def sample(self) -> GpuSample | None: ...

    def close(self) -> None: ...


class NullGpuMonitor:
    """No GPU to watch: every sample is None, and ``reason`` says why."""

    available: bool = False
    name: str | None = None

    def __init__(self, reason: str) -> None:
        self.reason: str | None = reason

    def sample(self) -> GpuSample | None:
        return None

    def close(self) -> None:
        return None


class NvmlGpuMonitor:
    """Reads one device through NVML; a failing read returns None instead of raising."""

    available: bool = True
    reason: str | None = None

    def __init__(self, nvml: Any, handle: Any, name: str | None) -> None:
        self._nvml = nvml
        self._handle = handle
        self.name = name
        self._closed = False

    def sample(self) -> GpuSample | None:
        if self._closed:
            return None
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        except Exception:  # a driver hiccup must not break the user's training
            return None
        return GpuSample(
            util_percent=float(util.gpu),
            memory_used_mb=memory.used / 2**20,
            memory_total_mb=memory.total / 2**20,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def _torch_device_uuid(index: int) -> str | None:
    """The NVML-style UUID (``GPU-...``) of torch's CUDA device ``index``, if torch knows it."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:
        return None
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_gpu_monitor(device_index: int | None = None, *, nvml: Any = None) -> GpuMonitor:
    """A monitor for torch's CUDA device ``device_index`` (default: the current one).

    ``nvml`` replaces the ``pynvml`` module (tests pass a fake one).
    """
    if nvml is None:
        try:
            import pynvml  # noqa: PLC0415 - optional dependency
        except ImportError:
            return NullGpuMonitor("nvidia-ml-py (pynvml) is not installed")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return NullGpuMonitor(f"NVML unavailable ({type(exc).__name__})")
    try:
        handle = _nvml_handle(nvml, device_index)
        name = _decode(nvml.nvmlDeviceGetName(handle))
    except Exception as exc:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
        return NullGpuMonitor(f"no NVML device for this process ({type(exc).__name__})")
    return NvmlGpuMonitor(nvml, handle, name)


def _nvml_handle(nvml: Any, device_index: int | None) -> Any:
    index = _torch_current_device() if device_index is None else device_index
    uuid = _torch_device_uuid(index) if _torch_has_cuda() else None
    if uuid is not None:
        with contextlib.suppress(Exception):
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        # The mask lists physical indices (or UUIDs) in torch's order.
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if index < len(entries):
            entry = entries[index]
            if entry.isdigit():
                return nvml.nvmlDeviceGetHandleByIndex(int(entry))
            return nvml.nvmlDeviceGetHandleByUUID(entry)
    if nvml.nvmlDeviceGetCount() <= index:
        raise LookupError(f"NVML sees no device {index}")
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _torch_has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _torch_current_device() -> int:
    local_rank = os.environ.get("LOCAL_RANK")
    if _torch_has_cuda():
        import torch

        with contextlib.suppress(Exception):
            return int(torch.cuda.current_device())
    return int(local_rank) if local_rank and local_rank.isdigit() else 0
