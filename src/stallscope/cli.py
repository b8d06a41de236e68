"""``stallscope COMMAND ...``: dispatch to one module per command (``commands/<name>.py``)."""

from __future__ import annotations

import os
import sys
from importlib import import_module

from . import __version__

COMMANDS = {
    "doctor": (
        "check + sweep + stage breakdown + tune + recommendations, one report (default: "
        "the built-in demo)"
    ),
    "bench": "measure throughput over a grid of loader settings",
    "tune": "find the fastest loader config within a time budget",
    "check": "worker-safety, memory and sample-health checks",
    "stages": "per-stage cost breakdown and augmentation overhead",
    "profile": "data stalls inside a training loop (the target's train_step)",
    "compare": (
        "two pipelines interleaved in one run: throughput ratio with its interval, a CI gate"
    ),
    "attach": "sample a running training process (PID): data wait, workers' stages, stuck threads",
    "report": "render a saved --json record as Markdown, HTML or console text; --against another",
}


def _usage() -> str:
    lines = ["usage: stallscope COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, text in COMMANDS.items()]
    lines += ["", "Run 'stallscope COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"-V", "--version", "version"}:
        print(f"stallscope {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"stallscope: unknown command {name!r}; choose one of {', '.join(COMMANDS)}.",
            file=sys.stderr,
        )
        return 2
    module = import_module(f"stallscope.commands.{name}")
    return int(module.main(rest))


def entry() -> None:
    """The ``stallscope`` program: :func:`main`, then exit. Where closing a loader's iterator
    overran its deadline (NOTE [closing iterators] in pipeline/kinds.py), the process ends without
    running finalizers, which could block on that iterator's threads."""
    code = main()
    from .pipeline.kinds import parked

    if parked():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
