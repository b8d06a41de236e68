"""NVML through a fake pynvml: the monitor's readings, and the null object when NVML is missing."""

from __future__ import annotations

import types

import pytest

from stallscope.runtime.gpu import NullGpuMonitor, NvmlGpuMonitor, open_gpu_monitor


def fake_nvml(
    *, init_fails: bool = False, util: int = 73, used: int = 3 * 2**30, total: int = 16 * 2**30
):
    calls: list[tuple] = []

    class NVMLError(Exception):
        pass

    def init():
        calls.append(("init",))
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    module = types.SimpleNamespace(
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append(("shutdown",)),
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: calls.append(("index", i)) or f"handle{i}",
        nvmlDeviceGetHandleByUUID=lambda u: calls.append(("uuid", u)) or f"handle-{u}",
        nvmlDeviceGetName=lambda h: b"Fake H100",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=util, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            used=used, total=total, free=total - used
        ),
    )
    module.calls = calls
    return module


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_nvml_monitor_reads_utilisation_and_memory():
    nvml = fake_nvml()
    monitor = open_gpu_monitor(1, nvml=nvml)
    assert isinstance(monitor, NvmlGpuMonitor) and monitor.available and monitor.name == "Fake H100"
    sample = monitor.sample()
    assert (
        sample.util_percent == 73.0
        and sample.memory_used_mb == 3072.0
        and sample.memory_total_mb == 16384.0
    )
    assert ("index", 1) in nvml.calls
    monitor.close()
    monitor.close()
    assert nvml.calls.count(("shutdown",)) == 1
    assert monitor.sample() is None


def test_visible_devices_mask_maps_torch_index_to_the_physical_device(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    nvml = fake_nvml()
    open_gpu_monitor(0, nvml=nvml)
    assert ("index", 3) in nvml.calls
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    nvml = fake_nvml()
    open_gpu_monitor(0, nvml=nvml)
    assert ("uuid", "GPU-abc") in nvml.calls


def test_missing_driver_gives_a_null_monitor():
    monitor = open_gpu_monitor(0, nvml=fake_nvml(init_fails=True))
    assert isinstance(monitor, NullGpuMonitor) and not monitor.available
    assert "NVML unavailable" in monitor.reason and monitor.sample() is None


def test_no_such_device_gives_a_null_monitor_and_shuts_nvml_down():
    nvml = fake_nvml()
    monitor = open_gpu_monitor(5, nvml=nvml)
    assert isinstance(monitor, NullGpuMonitor) and "no NVML device" in monitor.reason
    assert ("shutdown",) in nvml.calls


def test_a_failing_read_returns_none():
    nvml = fake_nvml()

    def broken(handle):
        raise RuntimeError("GPU is lost")

    nvml.nvmlDeviceGetUtilizationRates = broken
    assert open_gpu_monitor(0, nvml=nvml).sample() is None


def test_real_pynvml_here_gives_a_null_monitor_with_a_reason():
    monitor = open_gpu_monitor()
    if monitor.available:  # a machine with a GPU: the real reading must make sense
        sample = monitor.sample()
        assert sample is not None and 0 <= sample.util_percent <= 100
        monitor.close()
    else:
        assert monitor.reason
