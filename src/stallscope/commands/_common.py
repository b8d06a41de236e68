"""What every command shares: target and output options, error handling, clean exit.

A command's body gets a :class:`CommandContext`, fills ``ctx.record`` as it
goes (so Ctrl-C still leaves a partial report), and returns its exit code.
:func:`execute` turns a :class:`UsageError` into one sentence and exit code 2,
Ctrl-C into a partial report and exit code 130, and always reaps any child
process left behind (NOTE [worker shutdown] in ``runtime/processes.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import signal
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn

from ..errors import StallscopeError, UsageError
from ..record import RunRecord
from ..runtime.held_output import HeldOutput, held_note, holding
from ..runtime.processes import (
    TORCH_WORKER_WARNING,
    deferred_worker_deaths,
    describe_worker_death,
    is_worker_death,
    quiet_lost_handovers,
    reap_children,
    release_queue_feeders,
)


def command_parser(
    prog: str, description: str, *, target: str | None = "required"
) -> ArgumentParser:
    """A command's parser with the TARGET arguments (``target``: "required", "optional" or None)."""
    parser = ArgumentParser(prog=prog, description=description)
    if target is not None:
        add_target_arguments(parser, required=target == "required")
    return parser


def add_target_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "target",
        nargs=None if required else "?",
        help="path/to/file.py:fn or package.module:fn returning a Dataset, a DataLoader"
        " (or subclass), an object holding one, a torchdata.nodes graph, any iterable of batches,"
        " or a dict; keyword parameters of fn named like knobs (num_workers=, prefetch_factor=,"
        " batch_size=, threads=, ...) are tuned by calling it with other values",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="override the target's batch size"
    )
    parser.add_argument(
        "--collate", default=None, metavar="MODULE:FN", help="collate function to use"
    )


OUTPUT_HELP = {
    "json": "write the run record as JSON",
    "md": "write a Markdown report",
    "html": "write a self-contained HTML report",
}


@dataclass(frozen=True)
class Outputs:
    """The options :func:`execute` reads for every command: ``--json/--md/--html PATH`` (those in
    ``formats``; ``help`` rewords any), ``--quiet`` and ``--debug``."""

    formats: tuple[str, ...] = ("json", "md", "html")
    help: dict[str, str] = field(default_factory=dict)
    quiet_help: str = "no progress bars or console summary"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the options after the command's own, so ``--help`` lists them last."""
        for fmt in self.formats:
            text = self.help.get(fmt, OUTPUT_HELP[fmt])
            parser.add_argument(f"--{fmt}", type=Path, default=None, metavar="PATH", help=text)
        parser.add_argument("--quiet", action="store_true", help=self.quiet_help)
        parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")


def add_start_method_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--start-method", choices=multiprocessing.get_all_start_methods(), default=None, help=help
    )


def add_batch_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """``--timeout S``: how long the measured loader may take for one batch before it counts as
    hung."""
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for any one batch (default 60)"
    )


def add_target_rate_argument(parser: argparse.ArgumentParser) -> None:
    """``--target-rate N``: the samples/s the training step consumes, for the cores-needed
    estimate."""
    parser.add_argument(
        "--target-rate",
        type=float,
        default=None,
        metavar="N",
        help="samples/s your training step consumes: the report states the cores this pipeline "
        "needs at that rate (measured CPU per sample ÷ parallel efficiency)",
    )


def positive_target_rate(args: argparse.Namespace) -> float | None:
    rate = getattr(args, "target_rate", None)
    if rate is not None and not rate > 0:
        raise UsageError(f"--target-rate must be a positive number of samples/s, not {rate:g}.")
    return rate


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values


def bool_list(text: str) -> list[bool]:
    mapping = {
        "true": True,
        "1": True,
        "yes": True,
        "on": True,
        "false": False,
        "0": False,
        "no": False,
        "off": False,
    }
    try:
        return [mapping[v.strip().lower()] for v in text.split(",") if v.strip()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated true/false values, got {text!r}"
        ) from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad usage as one sentence and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}.")


@dataclass
class CommandContext:
    args: argparse.Namespace
    console: Console
    record: RunRecord | None = None
    started: float = field(default_factory=time.perf_counter)
    argv: list[str] = field(default_factory=list)  # the command's arguments, kept in the record

    @property
    def quiet(self) -> bool:
        return bool(getattr(self.args, "quiet", False))

    def new_record(self, command: str, target: str, pipeline: Any = None) -> RunRecord:
        """A record for this command; ``pipeline`` adds how the user built their loader
        (the ``loader`` section recommendations are written against)."""
        from ..runtime.host import host_info

        self.record = RunRecord(
            command=command,
            target=target,
            host=host_info().to_dict(),
            argv=["stallscope", command, *self.argv],
        )
        call = getattr(pipeline, "call", None)
        if call is not None:
            self.record.add(loader=call.to_dict())
        kind = getattr(pipeline, "kind", None)
        if kind is not None:
            self.record.add(loader_kind=kind.to_dict())
        return self.record


def execute(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    body: Callable[[CommandContext], int],
    *,
    runs_loaders: bool = True,
    outputs: Outputs = Outputs(),
) -> int:
    """Add the ``outputs`` options to ``parser``, parse, run ``body``, turn failures into one
    sentence and an exit code, write the reports asked for, reap every child.
    ``runs_loaders``: the command iterates loaders in this process, so torch's worker-death error
    is raised only where it is safe (NOTE [worker death]); a command that only reads records
    passes False and does not import torch."""
    outputs.add_arguments(parser)
    # Piped output gets a readable width instead of rich's 80-column default.
    console = Console(stderr=False, highlight=False, width=None if sys.stdout.isatty() else 140)
    # An error is one sentence on one line, however long its path: the terminal wraps it, rich
    # would cut it at its own width (a path cut in two cannot be copied).
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    ctx = CommandContext(
        args=args, console=console, argv=list(sys.argv[1:] if argv is None else argv)
    )
    code = 0
    held = HeldOutput()  # what the user's code printed when called again (NOTE [held output])
    interrupts: list[float] = []
    previous = _note_interrupts(interrupts)
    try:
        # Worker counts above the cores are configs stallscope measures on purpose; torch's
        # warning about them would only interleave with the report.
        deaths = deferred_worker_deaths() if runs_loaders else contextlib.nullcontext()
        with warnings.catch_warnings(), quiet_lost_handovers(), deaths, holding() as held:
            warnings.filterwarnings("ignore", message=TORCH_WORKER_WARNING, category=UserWarning)
            code = body(ctx)
        if interrupts:
            # Python drops a KeyboardInterrupt raised where exceptions are ignored (an at-fork
            # hook, a finaliser): the Ctrl-C still happened, so stop as if it had been seen.
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        _reap()
        err.print(
            "interrupted: workers stopped"
            + ("; writing the partial report." if ctx.record else ".")
        )
        if ctx.record is not None:
            ctx.record.partial = True
            _write_outputs(ctx, err)
        return 130
    except StallscopeError as exc:
        if getattr(args, "debug", False):
            err.print_exception()
        err.print(f"[bold red]error:[/] {_escape(str(exc))}", markup=True, highlight=False)
        hint = getattr(exc, "hint", None)
        if hint:
            err.print(_escape(hint), highlight=False)
        return exc.exit_code
    except RuntimeError as exc:
        if not is_worker_death(exc):
            raise
        # torch's SIGCHLD handler can raise this at any line (NOTE [worker death]).
        if getattr(args, "debug", False):
            err.print_exception()
        err.print(
            f"[bold red]error:[/] {_escape(describe_worker_death([], exc=exc))}",
            markup=True,
            highlight=False,
        )
        return 2
    finally:
        _reap()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        note = held_note(held)
        if note and not ctx.quiet:
            err.print(note, markup=False, highlight=False)
    if ctx.record is not None:
        _write_outputs(ctx, err)
    return code


def _note_interrupts(interrupts: list[float]) -> Any:
    """Make Ctrl-C raise KeyboardInterrupt as usual and also leave a note in ``interrupts``.

    Returns the handler it replaced (None where nothing was replaced: outside the main thread,
    or where SIGINT is ignored or handled by someone else, whose choice stands).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    current = signal.getsignal(signal.SIGINT)
    if current is not signal.default_int_handler:
        return None

    def on_sigint(signum: int, frame: Any) -> None:
        interrupts.append(time.monotonic())
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    return current


def _reap() -> None:
    """Reap every child; a late worker-death signal landing here must not leave the job half
    done."""
    for _ in range(3):  # torch's SIGCHLD handler raises at most once per iterator
        try:
            reap_children()
            break
        except RuntimeError:
            continue
    release_queue_feeders()  # nothing reads their pipes now (NOTE [queue feeders at exit])


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _write_outputs(ctx: CommandContext, err: Console) -> None:
    from ..render import write_report

    record = ctx.record
    assert record is not None
    record.duration_s = round(time.perf_counter() - ctx.started, 3)
    for attr in ("json", "md", "html"):
        path = getattr(ctx.args, attr, None)
        if path is not None:
            try:
                write_report(record, Path(path), fmt=attr)
            except OSError as exc:
                err.print(
                    f"[bold red]error:[/] cannot write {path}: {exc.strerror or exc}.", markup=True
                )
                continue
            if not ctx.quiet:
                err.print(f"wrote {path}")


@contextlib.contextmanager
def keeping_partial(keep: Callable[[Any], Any]) -> Iterator[None]:
    """Ctrl-C inside: what the interrupted probe measured so far (the ``partial`` it hangs on the
    interrupt: the sweep's, compare's) goes to ``keep`` before the interrupt goes on, so the
    partial report holds it."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        partial = getattr(interrupt, "partial", None)
        if partial is not None:
            keep(partial)
        raise


def fail(message: str) -> None:
    raise UsageError(message)


def same_named(args: argparse.Namespace, names: str) -> dict[str, Any]:
    """The parsed options ``names`` (space-separated) as keyword arguments of the same names: the
    options a command hands to its library function unchanged."""
    return {name: getattr(args, name) for name in names.split()}


def run_target_loader(args: argparse.Namespace) -> Any:
    """Load ``args.target`` with the CLI overrides into a Pipeline."""
    from ..target import load_target

    return load_target(args.target, batch_size=args.batch_size, collate=args.collate)


def progress_bar(
    console: Console,
    *,
    disable: bool,
    counter: str | None = "{task.completed}/{task.total}",
    description: str = "[progress.description]{task.description}",
    columns: tuple[ProgressColumn, ...] | None = None,
) -> Progress:
    """The progress display of every command: transient, silent with ``--quiet``.

    By default: description, bar, ``counter`` (None for none), elapsed time; ``columns`` replaces
    them.
    """
    if columns is None:
        columns = (
            TextColumn(description),
            BarColumn(),
            *([TextColumn(counter)] if counter else []),
            TimeElapsedColumn(),
        )
    return Progress(*columns, console=console, transient=True, disable=disable)


def print_summary(ctx: CommandContext, record: RunRecord, console: Console | None = None) -> None:
    """The command's console summary, through the one console path (``render.console``) that
    ``stallscope report`` uses too."""
    if ctx.quiet:
        return
    from ..render.console import ConsoleRenderer

    ConsoleRenderer().print(record, console or ctx.console)


# -- the ceiling and the cores needed (issue 18) -------------------------------------------------


def measure_cpu_cost(record: RunRecord, pipeline: Any) -> float:
    """Add the pipeline's measured CPU cost per sample (``cpu_cost``) to the record unless it holds
    one; returns the seconds it took."""
    from ..throughput.cpu_cost import measure_cpu_cost as probe

    if "cpu_cost" in record.sections:
        return 0.0
    started = time.perf_counter()
    try:
        cost = probe(pipeline)
    except Exception as exc:  # the pipeline's own failure is the measuring steps' to report
        record.add(cpu_cost={"error": f"{type(exc).__name__}: {exc}"})
    else:
        if cost is not None:
            record.add(cpu_cost=cost)
    return time.perf_counter() - started


def add_ceiling(record: RunRecord, pipeline: Any, target_rate: float | None = None) -> None:
    """The record's ``ceiling`` and ``cores_needed`` (NOTE [ceiling] in analysis/ceiling.py), the
    CPU cost per sample measured first where the record has none."""
    from ..analysis.ceiling import ceiling_sections

    measure_cpu_cost(record, pipeline)
    record.add(**ceiling_sections(record.to_dict(), target_rate))


# -- loader kinds and verified advice ------------------------------------------------------------


def kind_limits(pipeline: Any, operations: list[str]) -> list[dict[str, str]]:
    """``[{step, why}]`` for the operations this loader kind cannot run (NOTE [loader kinds])."""
    limits = pipeline.kind.limits
    return [{"step": op, "why": limits[op]} for op in operations if op in limits]


def refuse_on_kind(pipeline: Any, operation: str) -> None:
    """A command that cannot run on this loader kind at all: one sentence, exit 2."""
    why = pipeline.kind.limits.get(operation)
    if why:
        raise UsageError(f"`stallscope {operation}` cannot run here: {why}.")


def add_verified_advice(record: RunRecord, pipeline: Any) -> None:
    """The record's ``advice``: the code for the config to recommend, rendered by the one snippet
    builder and run for two batches first (NOTE [verified snippets] in pipeline/verify.py)."""
    from ..analysis.sections import best_configuration
    from ..config import LoaderConfig
    from ..pipeline.verify import run_snippet
    from ..render.loader_code import render_python
    from ..render.loader_snippet import Snippet, snippet_for_record, unsettable_after_build

    data = record.to_dict()
    baseline = data.get("baseline")
    recommended = best_configuration(data)  # the one winner every renderer shows
    if recommended is None or not recommended.config:
        return
    chosen = recommended.config
    config = LoaderConfig.from_dict(
        {k: v for k, v in chosen.items() if k in LoaderConfig.__dataclass_fields__}
    )
    advice: dict[str, Any] = {
        "config": chosen,
        "baseline": (baseline or {}).get("config") or pipeline.baseline.to_dict(),
        "kind": pipeline.kind.name,
        "kind_description": pipeline.kind.description,
        # What a trial of this kind can set: a sentence names only these (a factory's parameters).
        "knobs": None if pipeline.kind.rebuilds_from_parts else list(pipeline.kind.knobs),
        "python": None,
    }
    snippet = snippet_for_record(data, chosen)
    # The user's own API first: their factory where it takes the knobs (NOTE [a DataLoader's
    # factory]), else the call to their loader's constructor; where neither runs, the knobs set on
    # the object their factory returns, as trials set them on a copy.
    own_factory = (
        pipeline.kind.rebuilds_from_parts
        and pipeline.call is not None
        and pipeline.call.own_factory
    )
    rebuilt = snippet_for_record(data, chosen, form="rebuild") if own_factory else None
    candidates: list[Snippet] = []
    for option in (snippet, rebuilt, snippet_for_record(data, chosen, form="attributes")):
        if option is not None and all(
            render_python(option) != render_python(c) for c in candidates
        ):
            candidates.append(option)
    # The first form tried is the call to the user's factory (not the DataLoader call a missing
    # seeding keeps): where it does not run, the code that does says why.
    own_first = own_factory and bool(candidates) and candidates[0].form != "call"
    if not candidates:
        advice.update(
            verified=False,
            reason=f"stallscope cannot write {pipeline.kind.description} as a call to change",
        )
    references: dict[
        bool, str | None
    ] = {}  # each takes a batch from the user's pipeline: once per form
    after_build = "setting the knobs on the loader it builds"
    failed: list[tuple[str, str]] = []  # (form, why) of each form that did not run
    for i, candidate in enumerate(candidates):
        code = render_python(
            candidate,
            comment=textwrap.fill(f"{failed[0][0]} was tried first: {failed[0][1]}.", 96)
            if own_first and failed
            else None,
        )
        factory_form = candidate.form == "factory"
        whole = factory_form or bool(candidate.loader_path) or candidate.form == "attributes"
        if whole not in references:
            references[whole] = _reference_structure(pipeline, whole)
        run = run_snippet(
            code,
            reference=references[whole],
            # What a factory builds is checked where it is a DataLoader trials rebuild from its
            # parts: it must have the trial's knobs (NOTE [a DataLoader's factory]).
            config=None if factory_form and not pipeline.kind.rebuilds_from_parts else config,
            loader_path=candidate.loader_path,
            attributes=candidate.form == "attributes",
        )
        if run.ok or i == 0:
            advice.update(
                python=code if run.ok else None,
                tried=None if run.ok else code,
                form=candidate.form,  # --emit writes the form that ran
                **run.to_dict(),
            )
        if run.ok:
            break
        form = (
            f"the call to {pipeline.call.origin_name}()"
            if own_first and i == 0
            else after_build
            if candidate.form == "attributes"
            else "the call"
        )
        failed.append((form, run.reason or "it did not run"))
    settable_kind = pipeline.kind.name != "factory"  # a factory's trials set nothing on it
    if len(failed) == len(candidates) == 1 and candidates[0].form == "call" and settable_kind:
        unsettable = unsettable_after_build(config, pipeline.baseline)
        if unsettable:
            # The knobs-after-building form was not written: a changed knob cannot be set so.
            why = f"{', '.join(unsettable)} cannot be set once a loader is built"
            failed.append((after_build, why))
    if len(failed) > 1:
        # No form ran: each one's reason, not the first's alone.
        advice["reason"] = "; ".join(f"{form}: {why}" for form, why in failed)
    record.add(loader_code=advice)


def _reference_structure(pipeline: Any, factory_form: bool) -> str | None:
    """The user's batch as the snippet's loader must reproduce it: the wrapper's output when the
    snippet's loader is the wrapper (its factory called, or the loader put back into it), else the
    loader's own batch."""
    from ..pipeline.preflight import preflight
    from ..pipeline.structure import describe_structure

    if factory_form and pipeline.kind.name == "wrapped-dataloader":
        from ..pipeline.kinds import close_trial

        loader = pipeline.kind.build(pipeline.baseline)
        iterator = iter(loader)
        try:
            return describe_structure(next(iterator))
        except Exception:
            return None
        finally:
            close_trial(loader, iterator)
    try:
        return preflight(pipeline).batch_structure
    except Exception:
        return None
