"""The CUDA paths, run on a machine with a GPU: what stallscope does there and what it measured.

The test suite runs on machines without a GPU, where every CUDA branch is skipped or takes its
"no device" side. This script exercises those branches for real and records what it saw:

- ``profile`` of the demo's tiny CNN on ``cuda`` (device synchronised at each step boundary,
  NVML utilisation sampled), single-process and with workers: the stall must fall with workers;
- ``stages`` on ``cuda``: the pin and host→device rows must be measured (they are absent on CPU);
- ``bench`` with ``pin_memory`` on and off, in one run;
- ``doctor`` on the demo with a GPU present: exit code and the verdict's config;
- ``ss.watch`` in a hand-written CUDA loop whose step is long GPU work, with ``sync="cuda"`` and
  without it (the synchronise moves waiting for the device out of "data wait");
- a non-blocking copy from pinned memory, timed against a pageable one.

    PYTHONPATH=src python benchmarks/cuda_paths.py --out benchmarks/results/cuda_paths.json

Each CLI step runs as its own process with a timeout; a step that fails is recorded with its exit
code and the end of its output, and the script goes on.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import Provenance  # noqa: E402

DEMO = "stallscope.demo:pipeline"
DEMO_MODEL = "stallscope.demo:pipeline_with_model"


def cli(
    args: list[str], folder: Path, name: str, timeout: float, keep_console: bool = False
) -> dict[str, Any]:
    """Run ``python -m stallscope ARGS --json`` and return its exit code, wall time and record
    (and its console output with ``keep_console``: what a user reads on that machine)."""
    out = folder / f"{name}.json"
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "stallscope", *args, "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
        console = proc.stdout
    except subprocess.TimeoutExpired as exc:
        rc, tail = None, f"timed out after {timeout:.0f} s: {str(exc.stdout)[-800:]}"
        console = None
    record = json.loads(out.read_text()) if out.exists() else None
    return {
        "args": args,
        "exit_code": rc,
        "wall_s": round(time.perf_counter() - started, 1),
        "record": record,
        "output_tail": tail if rc != 0 else None,
        **({"console": console.splitlines()} if keep_console and console else {}),
    }


def profile_step(folder: Path, device: str, workers: int) -> dict[str, Any]:
    run = cli(
        [
            "profile",
            DEMO_MODEL,
            "--device",
            device,
            "--steps",
            "40",
            "--num-workers",
            str(workers),
            "--quiet",
        ],
        folder,
        f"profile_w{workers}",
        240,
    )
    record = run.pop("record") or {}
    gpu = record.get("gpu") or {}
    run.update(
        device=record.get("device"),
        sync=record.get("sync"),
        stall_fraction=record.get("stall_fraction"),
        verdict=record.get("verdict"),
        what_if_speedup=record.get("what_if_speedup"),
        gpu_util=record.get("gpu_util"),
        gpu=gpu,
        pin_memory=(record.get("config") or {}).get("pin_memory"),
        steps=record.get("steps"),
    )
    return run


def stages_step(folder: Path, device: str) -> dict[str, Any]:
    run = cli(
        ["stages", DEMO, "--device", device, "--samples", "256", "--quiet"],
        folder,
        "stages",
        240,
    )
    record = run.pop("record") or {}
    run["device"] = (record.get("stage_run") or {}).get("device")
    run["stages"] = [
        {"name": row.get("name"), "ms_per_sample": row.get("ms_per_sample")}
        for row in record.get("stages") or []
    ]
    return run


def bench_step(folder: Path) -> dict[str, Any]:
    run = cli(
        ["bench", DEMO, "--num-workers", "4", "--pin-memory", "true,false", "--quiet"],
        folder,
        "bench_pin",
        300,
    )
    record = run.pop("record") or {}
    run["results"] = [
        {
            "pin_memory": (row.get("config") or {}).get("pin_memory"),
            "samples_per_s": (row.get("samples_per_s") or {}).get("median"),
        }
        for row in record.get("results") or []
    ]
    return run


def doctor_step(folder: Path) -> dict[str, Any]:
    md, html = folder / "doctor.md", folder / "doctor.html"
    run = cli(
        [
            "doctor",
            "--budget",
            "40",
            "--check-budget",
            "20",
            "--changes-budget",
            "20",
            "--md",
            str(md),
            "--html",
            str(html),
        ],
        folder,
        "doctor",
        420,
        keep_console=True,
    )
    record = run.pop("record") or {}
    analysis = record.get("analysis") or {}
    label = analysis.get("label")
    surfaces = {
        "console": "\n".join(run.get("console") or []),
        "md": md.read_text() if md.exists() else "",
        "html": html.read_text() if html.exists() else "",
    }
    # the one-verdict check on this machine: every surface names the verdict's config
    run["label_on_surfaces"] = {
        name: bool(label) and label in _words(text) for name, text in surfaces.items()
    }
    for key in ("action", "label", "samples_per_s", "measurement", "gain", "confidence", "rounds"):
        run[key] = analysis.get(key)
    run["pin_memory"] = (analysis.get("config") or {}).get("pin_memory")
    run["bound"] = analysis.get("bound")
    run["ceiling"] = analysis.get("ceiling")
    run["host"] = record.get("host")
    return run


def _words(text: str) -> str:
    """Text without markup or line breaks (a console wraps, HTML tags a label's parts)."""
    text = re.sub(r"<[^>]+>", "", text)
    text = html.unescape(text).replace("**", "").replace("`", "")
    return " ".join(text.split())


def watch_step(device: str) -> dict[str, Any]:
    """What the device synchronise changes: a loop whose step queues ~20 ms of GPU work and never
    waits for it, fed by a loader that copies each (tiny, ready) batch to the GPU in ``next()``,
    as GPU-prefetching wrappers do. That copy waits for the queued kernels, so without a
    synchronise the device's time lands in "data wait"; the truth is a compute-bound loop."""
    import torch

    import stallscope as ss

    if device != "cuda":
        return {"skipped": "no CUDA device"}
    x = torch.randn(4096, 4096, device="cuda")

    def device_loader():  # a pageable copy: the host waits until the stream reaches it
        for _ in range(60):
            yield torch.randn(64, 64).to("cuda")

    def step(batch: torch.Tensor) -> torch.Tensor:
        y = x
        for _ in range(8):  # queued kernels: the host returns long before the device finishes
            y = y @ x
            y = y / y.norm()
        return y

    out: dict[str, Any] = {}
    for sync in ("cuda", None):
        torch.cuda.synchronize()
        watched = ss.watch(device_loader(), sync=sync, warmup=5)
        for batch in watched:
            step(batch)
        torch.cuda.synchronize()
        record = watched.to_dict()
        out[f"sync={sync}"] = {
            "stall_fraction": record["stall_fraction"],
            "verdict": record["verdict"],
            "data_ms_p50": (record.get("data_ms") or {}).get("p50"),
            "compute_ms_p50": (record.get("compute_ms") or {}).get("p50"),
            "gpu_util": record.get("gpu_util"),
            "gpu": record.get("gpu"),
            "sync": record.get("sync"),
        }
    return out


def copy_step(device: str) -> dict[str, Any]:
    """Host→device copy of a 64 MiB batch: pageable vs pinned + non_blocking, median of 20."""
    import torch

    if device != "cuda":
        return {"skipped": "no CUDA device"}
    pageable = torch.randn(16, 1024, 1024)
    pinned = pageable.pin_memory()
    times: dict[str, list[float]] = {"pageable": [], "pinned_non_blocking": []}
    for _ in range(20):
        for name, source, non_blocking in (
            ("pageable", pageable, False),
            ("pinned_non_blocking", pinned, True),
        ):
            torch.cuda.synchronize()
            start = time.perf_counter()
            source.to("cuda", non_blocking=non_blocking)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    mib = pageable.numel() * pageable.element_size() / 2**20
    return {
        name: {
            "median_ms": round(1000 * sorted(values)[len(values) // 2], 3),
            "gib_per_s": round(mib / 1024 / sorted(values)[len(values) // 2], 1),
        }
        for name, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/cuda_paths.json")
    parser.add_argument("--commit", help="the commit, where the tree travelled without .git")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out")
    args = parser.parse_args()
    import torch

    provenance = Provenance.start()
    if args.commit:
        provenance.commit = args.commit
    device = "cuda" if torch.cuda.is_available() else "cpu"
    skip = set(filter(None, args.skip.split(",")))
    steps: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else None,
    }
    try:
        import pynvml  # noqa: F401

        steps["nvml"] = True
    except ImportError:
        steps["nvml"] = False
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plan = {
            "copy": lambda: copy_step(device),
            "watch": lambda: watch_step(device),
            "profile_w0": lambda: profile_step(folder, device, 0),
            "profile_w4": lambda: profile_step(folder, device, 4),
            "stages": lambda: stages_step(folder, device),
            "bench_pin": lambda: bench_step(folder),
            "doctor": lambda: doctor_step(folder),
        }
        for name, run in plan.items():
            if name in skip:
                continue
            print(f"== {name}", flush=True)
            try:
                steps[name] = run()
            except Exception as exc:  # record it and go on: one broken step must not hide others
                steps[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(steps[name], indent=1, default=str)[:1500], flush=True)
    payload = {"provenance": provenance.finish(), "steps": steps}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
