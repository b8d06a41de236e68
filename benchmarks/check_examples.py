"""One real finding of every ``check`` code, from the test pipelines (the examples in
docs/checks.md).

Runs ``ss.check`` on the datasets of ``tests/pipelines/check_datasets.py`` (and the unsharded
stream of ``tests/pipelines/real_streams.py``), each with the one code it exhibits, in real worker
processes, and writes each finding (code, severity, message, evidence, fix) with the call that
produced it. Times and MB figures depend on the machine; the findings' shape does not.

    python benchmarks/check_examples.py [--json benchmarks/results/check_examples.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "pipelines"))

import check_datasets as cd  # noqa: E402
import real_streams  # noqa: E402
from _provenance import Provenance  # noqa: E402

import stallscope as ss  # noqa: E402

# code -> (pipeline, keyword arguments of ss.check); the same calls as tests/e2e/test_check_codes.py
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "unpicklable": (cd.lambda_transform, {"only": ["unpicklable"], "start_method": "spawn"}),
    "duplicate-rng": (cd.shared_generator, {"only": ["duplicate-rng"]}),
    "memory-growth": (cd.leaky_cache, {"only": ["memory-growth"]}),
    "iterable-duplicates": (real_streams.unsharded, {"only": ["iterable-duplicates"]}),
    "copy-on-write": (
        cd.annotations,
        {"only": ["copy-on-write", "memory-growth"], "start_method": "fork"},
    ),
    "slow-samples": (cd.slow_samples, {"only": ["slow-samples"]}),
    "hang": (cd.hanging, {"only": ["hang", "getitem-error"], "timeout": 1.5}),
    "getitem-error": (cd.raising, {"only": ["getitem-error", "hang"]}),
    "collate-error": (cd.ragged, {"only": ["collate-error"]}),
    "shm-too-small": (
        cd.big_batches,
        {"only": ["shm-too-small"], "shm_free_bytes": 8 * 1024 * 1024},
    ),
    "oversubscription": (cd.thread_hungry, {"only": ["oversubscription"]}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=HERE / "results" / "check_examples.json")
    parser.add_argument(
        "--codes", default=",".join(CASES), help="comma-separated codes (default: all)"
    )
    args = parser.parse_args()
    provenance = Provenance.start()
    examples: dict[str, Any] = {}
    for code in [c for c in args.codes.split(",") if c]:
        pipeline, kwargs = CASES[code]
        started = time.perf_counter()
        result = ss.check(pipeline, **kwargs)
        found = [f.to_dict() for f in result.findings if f.code == code]
        examples[code] = {
            "pipeline": f"{Path(pipeline.__code__.co_filename).name}:{pipeline.__name__}",
            "check_kwargs": kwargs,
            "seconds": round(time.perf_counter() - started, 1),
            "finding": found[0] if found else None,
        }
        print(f"{code}: {found[0]['message'] if found else 'NOT FOUND'}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "provenance": provenance.finish(),
                "tool_version": ss.__version__,
                "examples": examples,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"wrote {args.json}")
    return 0 if all(e["finding"] for e in examples.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
