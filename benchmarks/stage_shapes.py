"""How much of the sample time ``stallscope stages`` leaves unexplained on real-shape loaders.

The detection loader (OpenCV decode, 4-image mosaic, affine warp) and the text-to-speech
loader (WAV read, STFT, mel projection) of ``tests/pipelines/`` carry no ``ss.stage``
marker. For each, the share of ``other (__getitem__)`` is printed with the library
attribution alone (``--no-callees``) and with the calls of ``__getitem__`` broken out,
plus the named rows that explain the time.

    python benchmarks/stage_shapes.py [--samples 256] [--workers 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "pipelines"))  # spawned workers inherit sys.path

import stallscope as ss  # noqa: E402

SHAPES = {"detection": "real_detection:make_loader", "audio": "real_audio:make_loader"}
OTHER = "other (__getitem__)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    for shape, target in SHAPES.items():
        for callees in (False, True):
            result = ss.stages(
                target,
                num_workers=args.workers,
                samples=args.samples,
                hotspots=0,
                differential=False,
                callees=callees,
            )
            other = result.stage(OTHER)
            named = ", ".join(
                f"{s.name} {100 * s.share:.1f}%"
                for s in result.stages
                if s.kind in ("read", "decode", "call")
            )
            label = "calls broken out" if callees else "libraries only  "
            print(
                f"{shape:9} {label}: other {100 * other.share:5.1f}% ({other.ms_per_sample:.2f} "
                f"ms of {result.total_ms_per_sample:.2f} ms/sample); {named}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
