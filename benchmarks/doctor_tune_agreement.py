"""``doctor`` and ``tune`` back to back on the same target: the same config, or both say the noise
allows another (issue "One verdict", item 4).

For each target, ``stallscope doctor TARGET --json`` and ``stallscope tune TARGET --json`` run one
after the other (the order alternates between targets, so neither always runs first on a machine
that drifts), with the commands' default budgets. From each record's derived ``analysis`` block
(the one verdict every surface renders) this script reads the config to use and whether the run
hedged it: no confidence (fewer than two paired rounds), a tie within the noise named, or "keep
yours" within the noise.

A pair *agrees* when both name the same config on the knobs a run sets (workers, threads, batch
size, prefetch depth, in-order delivery; ``persistent_workers`` is decided by a separate
epoch-boundary measurement and is left out); it is *consistent* when it agrees, when both runs
hedged, or when each names the other's pick within the noise of its own (a tie in its race, or an
unraced config within that run's own spread: NOTE [plateau] in analysis/plateau.py).
Exit code 0 when every pair is consistent.

    python benchmarks/doctor_tune_agreement.py --json benchmarks/results/doctor_tune_agreement.json
    python benchmarks/doctor_tune_agreement.py --targets latency cpu     # a subset
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import Provenance  # noqa: E402

# The knobs compared; persistent_workers comes from the epoch-boundary measurement, not the race.
KNOBS = ("num_workers", "worker_threads", "batch_size", "prefetch_factor", "in_order")


def latency_loader() -> Any:
    """A latency-bound source: 5 ms of waiting per item (GIL released), batches of 16."""
    import torch
    from _datasets import SleepCost

    return torch.utils.data.DataLoader(SleepCost(0.005, n=8192), batch_size=16)


def cpu_loader() -> Any:
    """A CPU-bound source: 1.5 ms of Python work per item (GIL held), batches of 32."""
    import torch
    from _datasets import SpinCost

    return torch.utils.data.DataLoader(SpinCost(0.0015, n=8192), batch_size=32)


TARGETS = {
    "demo": "stallscope.demo.dataset:pipeline",
    "latency": f"{HERE / 'doctor_tune_agreement.py'}:latency_loader",
    "cpu": f"{HERE / 'doctor_tune_agreement.py'}:cpu_loader",
    "factory": f"{HERE.parent / 'tests' / 'pipelines' / 'real_loader_kinds.py'}:threaded_stream",
}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(command: str, target: str, timeout: float) -> dict[str, Any]:
    """One command on ``target``; its record's verdict, exit code and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "stallscope", command, target, "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp,  # doctor writes its stallscope-report/ folder where it runs
        )
        wall = time.perf_counter() - t0
        record = json.loads(out.read_text()) if out.exists() else {}
    analysis = record.get("analysis") or {}
    config = analysis.get("config") or {}
    return {
        "command": command,
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "action": analysis.get("action"),
        "label": analysis.get("label"),
        "knobs": {k: config.get(k) for k in KNOBS} if config else None,
        "samples_per_s": analysis.get("samples_per_s"),
        "measurement": analysis.get("measurement"),
        "confidence": analysis.get("confidence"),
        "rounds": analysis.get("rounds"),
        "tied_with": analysis.get("tied_with"),
        # the configs this verdict names within the noise of its pick: a tie in the race, or
        # unraced configs within this run's own spread (NOTE [plateau])
        "near": near(analysis),
        # every config the run measured (the sweep's and the tuner's), to tell a pick the other
        # command never measured from one it measured and did not name
        "measured": sorted(
            {plain(r.get("label")) for r in [*record.get("results", []), *record.get("trials", [])]}
            - {""}
        ),
        "hedged": hedged(analysis),
        "error": None if proc.returncode in (0, 1) else proc.stderr.strip()[-400:],
    }


def plain(label: Any) -> str:
    """A label without ``persistent`` (the epoch-boundary step adds it; the race does not)."""
    return " ".join(t for t in str(label or "").split() if t != "persistent")


def near(analysis: dict[str, Any]) -> list[str]:
    named = [analysis.get("tied_with")]
    named += [c.get("label") for c in (analysis.get("within_noise") or {}).get("configs") or []]
    return sorted({plain(label) for label in named if label})


def hedged(analysis: dict[str, Any]) -> bool:
    """The verdict says another run may pick another config: no confidence, a tie within the
    noise, or the user's config kept within the noise."""
    return (
        analysis.get("confidence") is None
        or analysis.get("tied_with") is not None
        or analysis.get("action") == "keep-yours"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=sorted(TARGETS), default=list(TARGETS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=600.0, help="per command, seconds")
    args = parser.parse_args()
    prov = Provenance.start()
    pairs = []
    for i, name in enumerate(args.targets):
        order = ("doctor", "tune") if i % 2 == 0 else ("tune", "doctor")
        runs = {}
        for command in order:
            log(f"{name}: {command} …")
            runs[command] = run(command, TARGETS[name], args.timeout)
            log(f"  {runs[command]['label']} ({runs[command]['measurement']})")
        doctor, tune = runs["doctor"], runs["tune"]
        agree = doctor["knobs"] is not None and doctor["knobs"] == tune["knobs"]
        # Each names the other's pick within the noise of its own: both say they may differ.
        mutual = plain(tune["label"]) in doctor["near"] and plain(doctor["label"]) in tune["near"]
        pairs.append(
            {
                "target": name,
                "order": list(order),
                "doctor": doctor,
                "tune": tune,
                "agree": agree,
                "both_hedged": doctor["hedged"] and tune["hedged"],
                "each_names_the_other": mutual,
                "doctor_measured_tunes_pick": plain(tune["label"]) in doctor["measured"],
                "tune_measured_doctors_pick": plain(doctor["label"]) in tune["measured"],
                "consistent": agree or (doctor["hedged"] and tune["hedged"]) or mutual,
            }
        )
        log(f"  agree: {agree}; consistent: {pairs[-1]['consistent']}")
    payload = {
        "provenance": prov.finish(),
        "knobs_compared": list(KNOBS),
        "pairs": pairs,
        "agreed": sum(p["agree"] for p in pairs),
        "consistent": sum(p["consistent"] for p in pairs),
        "of": len(pairs),
    }
    text = json.dumps(payload, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0 if payload["consistent"] == payload["of"] else 1


if __name__ == "__main__":
    sys.exit(main())
