"""Starting the process group torchrun describes (stallscope.runtime.distributed)."""

from __future__ import annotations

import pytest
import torch

from stallscope.errors import UsageError
from stallscope.runtime.distributed import init_from_env, launched_by_torchrun


@pytest.fixture
def second_rank(monkeypatch):
    """This process as torchrun's local rank 1 of 2, on a node with one GPU."""
    for name, value in {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29599",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    asked = []  # what CUDA and torch.distributed were asked to do (nothing, with the fix)
    monkeypatch.setattr(torch.cuda, "set_device", asked.append)
    monkeypatch.setattr(
        torch.distributed, "init_process_group", lambda **kwargs: asked.append(kwargs)
    )
    return asked


def test_a_rank_with_no_gpu_of_its_own_is_one_sentence_not_a_cuda_error(second_rank):
    # Seen on a one-GPU machine: two ranks of `profile` with the default device, CUDA there;
    # rank 1 died in torch.cuda.set_device with "invalid device ordinal" and a traceback.
    assert launched_by_torchrun()
    with pytest.raises(UsageError) as raised:
        init_from_env("cuda")
    message = str(raised.value)
    assert "local rank 1" in message and "1 GPU(s)" in message
    assert "--nproc-per-node" in message and "--device cpu" in message
    assert second_rank == []  # nothing was asked of CUDA


def test_outside_torchrun_nothing_is_started(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    assert init_from_env("cuda") is False
