"""What the machine offers this process: usable cores, memory, torch, CUDA, /dev/shm.

"Cores" always means the cores this process may use: the CPU affinity mask,
further capped by a cgroup CPU quota (containers), never ``os.cpu_count()``.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil


def _cgroup_quota_cores() -> float | None:
    """The CPU quota of this process's cgroup in cores, or None when unlimited."""
    # cgroup v2: "max 100000" or "200000 100000"
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
    except (OSError, ValueError, IndexError):
        pass
    # cgroup v1
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return quota / period
    except (OSError, ValueError):
        pass
    return None


def usable_cores() -> int:
    """Cores this process may run on: affinity, capped by the cgroup quota (at least 1)."""
    env = os.environ.get("STALLSCOPE_CORES")
    if env:
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota_cores()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def shm_free_bytes() -> int | None:
    """Free bytes in /dev/shm (where worker batches travel), or None where absent."""
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return None


CACHE_ENV = "STALLSCOPE_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Folder that holds stallscope's caches (demo images, tuned configs): ``cache_dir`` when given,
    else ``$STALLSCOPE_CACHE``, else ``~/.cache/stallscope``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "stallscope"


@dataclass
class HostInfo:
    cores: int
    logical_cpus: int
    memory_bytes: int
    memory_available_bytes: int
    shm_free_bytes: int | None
    torch: str
    cuda: str | None
    gpu: str | None
    python: str
    platform: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_info() -> HostInfo:
    import platform

    import torch

    gpu = None
    cuda = None
    if torch.cuda.is_available():
        cuda = torch.version.cuda
        try:
            gpu = torch.cuda.get_device_name(0)
        except Exception:  # a broken driver must not break a report
            gpu = "unknown CUDA device"
    vm = psutil.virtual_memory()
    return HostInfo(
        cores=usable_cores(),
        logical_cpus=os.cpu_count() or 1,
        memory_bytes=vm.total,
        memory_available_bytes=vm.available,
        shm_free_bytes=shm_free_bytes(),
        torch=torch.__version__,
        cuda=cuda,
        gpu=gpu,
        python=platform.python_version(),
        platform=platform.platform(terse=True),
    )


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
