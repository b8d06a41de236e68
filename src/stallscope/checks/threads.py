"""How many threads one worker may run at once: torch, OpenCV, BLAS and OpenMP pools.

Called inside a worker after it fetched samples, so the pools the dataset's
code actually loaded are there. torch's DataLoader sets
``torch.set_num_threads(1)`` in each worker, but OpenCV and the BLAS/OpenMP
runtimes bundled with NumPy or other libraries default to one thread per CPU,
and a ``worker_init_fn`` may raise torch's count again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Any

THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)

# library file name fragment -> (pool name, getter symbols to try)
_NATIVE_POOLS = (
    (
        "openblas",
        "openblas",
        (
            "openblas_get_num_threads",
            "openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads",
        ),
    ),
    ("libgomp", "openmp", ("omp_get_max_threads",)),
    ("libiomp", "openmp", ("omp_get_max_threads",)),
    ("libomp", "openmp", ("omp_get_max_threads",)),
    ("mkl_rt", "mkl", ("MKL_Get_Max_Threads", "mkl_get_max_threads")),
)


def _loaded_libraries() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if ".so" in line and "/" in line}
    except OSError:
        return []
    return sorted(paths)


def native_thread_pools() -> dict[str, int]:
    """Thread counts of the BLAS/OpenMP runtimes loaded in this process (Linux; {} elsewhere)."""
    pools: dict[str, int] = {}
    for path in _loaded_libraries():
        name = os.path.basename(path)
        for fragment, pool, symbols in _NATIVE_POOLS:
            if fragment not in name:
                continue
            try:
                lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            for symbol in symbols:
                getter = getattr(lib, symbol, None)
                if getter is None:
                    continue
                getter.restype = ctypes.c_int
                with contextlib.suppress(Exception):
                    pools[pool] = max(pools.get(pool, 0), int(getter()))
                break
    return pools


def _modules_of(objects: Any, depth: int = 2) -> set[str]:
    """Modules defining the classes and functions of ``objects`` and of their attributes
    (shallow)."""
    names: set[str] = set()
    seen: set[int] = set()
    todo = [(obj, 0) for obj in objects]
    while todo:
        obj, level = todo.pop()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        module = getattr(obj, "__module__", None) if callable(obj) else type(obj).__module__
        if isinstance(module, str):
            names.add(module)
        if level >= depth:
            continue
        children = (
            list(obj)
            if isinstance(obj, (list, tuple))
            else list(getattr(obj, "__dict__", {}).values())
        )
        todo.extend((child, level + 1) for child in children[:64])
    return names


def uses_module(objects: Any, module: Any) -> bool:
    """Whether code that defines ``objects`` (the dataset, its transforms, the collate) imports
    ``module``."""
    for name in _modules_of(objects):
        namespace = getattr(sys.modules.get(name), "__dict__", {})
        if any(value is module for value in namespace.values()):
            return True
    return False


def thread_report(*pipeline_objects: Any) -> dict[str, Any]:
    """Thread pools of this process as the worker sees them.

    OpenCV's pool counts only where the pipeline's own code uses OpenCV: an import by something
    else in the parent (inherited under fork) starts no threads in the workers.
    """
    import torch

    report: dict[str, Any] = {
        "torch": torch.get_num_threads(),
        "cv2": None,
        "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and (not pipeline_objects or uses_module(pipeline_objects, cv2)):
        with contextlib.suppress(Exception):
            report["cv2"] = int(cv2.getNumThreads())
    report.update(native_thread_pools())
    try:
        import psutil

        report["os_threads"] = psutil.Process().num_threads()
    except Exception:
        report["os_threads"] = None
    return report
