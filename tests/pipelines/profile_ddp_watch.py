"""A user's own torchrun training script using ss.watch (run by tests/e2e/test_torchrun_profile.py).

    torchrun --standalone --nproc-per-node 2 profile_ddp_watch.py OUT.json

Rank 1's data is slower; every rank measures, ``w.gather()`` collects, rank 0 writes OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from profile_synthetic import SleepDataset  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import stallscope as ss  # noqa: E402


def main(out: str) -> None:
    dist.init_process_group("gloo")
    dataset = SleepDataset(64, 0.0005, slow_rank=1, slow_cost_s=0.006)
    loader = DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=False))
    model = torch.nn.Linear(4, 2)
    w = ss.watch(loader, name="ddp")
    for x, _ in w:
        with torch.no_grad():
            model(x)
        time.sleep(0.002)
    result = w.gather()  # every rank calls it
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump(result, handle)
        print(ss.stall_summary(w))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
