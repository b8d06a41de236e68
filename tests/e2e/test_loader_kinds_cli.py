"""Every loader kind through the real CLI (NOTE [loader kinds]): measured as it is, tuned through
what it exposes, and every printed snippet executed as printed (NOTE [verified snippets])."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _cli import run_stallscope

from stallscope.render.loader_code import render_python
from stallscope.render.loader_snippet import snippet_for_record

PIPELINES = Path(__file__).parent.parent / "pipelines"
KINDS = "real_loader_kinds.py"


# Nothing here reads how good the tuner's pick is (the tuner benchmarks do): what kind of loader
# it tuned, and that the code it prints runs. The shortest budget that still races a pick.
TUNE_BUDGET = "4"


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_stallscope(*args, cwd=PIPELINES, timeout=timeout)


# Stop the loader's threads and workers before the script exits, as a training script's end would: a
# torchdata graph whose mapper threads are still running when the interpreter exits can abort it.
STOP = "from stallscope.pipeline.kinds import close_trial\nclose_trial(loader, it)\n"


def _two_batches(code: str) -> str:
    """Run printed code from the target's folder, as a user would, and describe two batches."""
    script = code + (
        "\nfrom stallscope.pipeline.structure import describe_structure\n"
        "it = iter(loader)\nfirst = next(it)\nnext(it)\nprint('STRUCTURE', "
        "describe_structure(first))\n" + STOP
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PIPELINES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("STRUCTURE", 1)[1].strip()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Callable[[str], tuple[subprocess.CompletedProcess, Path]]:
    """`tune --emit python --json` of a factory in KINDS, run once: the console's code and the
    record of the same run."""
    runs: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def run(factory: str) -> tuple[subprocess.CompletedProcess, Path]:
        if factory not in runs:
            out = tmp_path_factory.mktemp(factory) / "tune.json"
            done = run_cli(
                "tune",
                f"{KINDS}:{factory}",
                "--budget",
                TUNE_BUDGET,
                "--emit",
                "python",
                "--json",
                str(out),
                "--quiet",
            )
            runs[factory] = done, out
        return runs[factory]

    return run


@pytest.mark.parametrize(
    ("factory", "kind"),
    [
        ("nodes_graph", "torchdata-nodes"),
        ("wrapped_loader", "wrapped-dataloader"),
        ("mapping_batches", "dataloader"),
        ("threaded_stream", "factory"),
        ("sharded_text", "dataloader-subclass"),
        ("stateful_text", "dataloader-subclass"),
        ("sampled_batches", "factory"),
    ],
)
def test_tune_prints_only_code_that_runs(factory, kind, tuned):
    done, out = tuned(factory)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["loader_kind"]["name"] == kind
    assert record["best"]["samples_per_s"] > 0
    code = record["loader_code"]
    if code["verified"]:
        assert "loader = " in done.stdout
        structure = _two_batches(done.stdout)
        assert structure.split("[")[0] == code["structure"].split("[")[0]
    else:  # no code that was not run: the change in words, and why
        assert "loader = " not in done.stdout and code["reason"]
        assert all(line.startswith("#") for line in done.stdout.strip().splitlines())
    if factory == "sharded_text":
        assert code["verified"], code
        # Keeping yours is the factory's own call; a change is the subclass's constructor call,
        # which must carry the keyword-only arguments it requires. The tuner's pick is the noise's
        # to decide, so the constructor call is also written for a pick of one more worker.
        keeps = record["analysis"]["action"] != "switch"
        assert ("loader = sharded_text()" in done.stdout) == keeps, done.stdout
        rebuilt = _advice_for(
            f"{KINDS}:{factory}", num_workers=record["baseline"]["config"]["num_workers"] + 1
        )
        assert rebuilt["verified"], rebuilt["reason"]
        for text in [rebuilt["python"], *([] if keeps else [done.stdout])]:
            assert "ShardedTextLoader(" in text and "corpus_size=512" in text and "rank=0" in text
            assert "collate_fn" not in text  # its constructor builds its own


def test_an_iterable_of_batches_is_measured_but_not_tuned(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli(
        "bench", f"{KINDS}:batch_stream", "--repeats", "1", "--window", "0.4", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert [r["config"]["num_workers"] for r in record["results"]] == [0]  # measured as it is
    assert record["results"][0]["samples_per_s"]["median"] > 0
    assert record["dataset"]["kind"]["name"] == "iterable"
    tuned = run_cli("tune", f"{KINDS}:batch_stream", "--budget", "5")
    assert tuned.returncode == 2 and "Traceback" not in tuned.stderr
    said = " ".join(tuned.stderr.split())  # rich wraps long lines
    assert "measured as it is" in said and "num_workers=" in said


@pytest.mark.parametrize("command", ["check", "stages"])
def test_check_and_stages_run_on_a_graph_and_say_what_they_cannot(command):
    # NOTE [declared stages], NOTE [pipeline checks]: no Dataset, but its own stages and tree
    limit = ("--budget", "10") if command == "check" else ("--max-seconds", "3")
    done = run_cli(command, f"{KINDS}:nodes_graph", *limit)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = " ".join(done.stdout.split())
    if command == "stages":
        assert "JpegDataset.__getitem__ (ParallelMapper)" in said
    else:
        assert "not checked: duplicate-rng" in said


def test_doctor_on_a_graph_checks_it_and_breaks_it_down(tmp_path):
    done = run_cli(
        "doctor",
        f"{KINDS}:nodes_graph",
        "--budget",
        TUNE_BUDGET,
        "--changes-budget",
        "1",
        "--check-budget",
        "10",  # the probes share it: the test reads that the check ran, not its coverage
        "--num-workers",
        "0,2",  # the sweep: nothing here reads the scaling
        "--repeats",
        "1",  # one sweep pass: nothing here reads the sweep's spread
        "--out",
        str(tmp_path / "r"),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "report.json").read_text())
    assert not {item["step"] for item in record.get("not_run") or []} & {"check", "stages"}
    assert not [f for f in record.get("findings", []) if f.get("severity") == "error"]
    assert record["best"]["samples_per_s"] > 0
    assert record["coverage"]["mode"] == "pipeline"  # checked as it runs
    assert any("ParallelMapper" in row["name"] for row in record["stages"])


def _bench(tmp_path: Path, factory: str, workers: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``bench`` of a factory in KINDS over ``workers``, one short pass each; the run and its
    record."""
    out = tmp_path / "bench.json"
    options = ("--num-workers", workers, "--repeats", "1", "--window", "0.4", "--json", str(out))
    done = run_cli("bench", f"{KINDS}:{factory}", *options)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done, json.loads(out.read_text())


def test_a_loader_whose_sampler_yields_batches_is_measured_in_its_own_samples(tmp_path):
    # Automatic batching off (batch_size=None): __getitem__ takes the sampler's lists and refuses
    # an integer. Trials are copies of the loader; its batches of 16 count 16 samples each; the
    # per-index checks say why they did not run instead of fetching dataset[0].
    done, record = _bench(tmp_path, "sampled_batches", "0,2")
    assert record["dataset"]["kind"]["name"] == "factory"
    assert "batch_size" not in record["dataset"]["kind"]["knobs"]
    assert record["dataset"]["batch"].startswith("{frames: Tensor[16,20,8]")
    for row in record["results"]:
        per_batch = row["samples_per_s"]["median"] / row["batches_per_s"]["median"]
        assert 15.0 < per_batch <= 16.0  # 30 batches of 16 an epoch, none short
    checked = tmp_path / "check.json"
    done = run_cli("check", f"{KINDS}:sampled_batches", "--budget", "10", "--json", str(checked))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(checked.read_text())
    assert not [f for f in record["findings"] if f["code"] == "getitem-error"]
    not_checked = record["coverage"]["not_checked"]
    reasons = {code: n["reason"] for n in not_checked for code in n["codes"]}
    assert "__getitem__ takes instead" in reasons["duplicate-rng"]


def test_token_batches_report_tokens_per_second(tmp_path):
    done, record = _bench(tmp_path, "mapping_batches", "0")
    row = record["results"][0]
    # a UserDict batch of padded token ids with an attention mask: tokens counted, padding not
    assert 0 < row["tokens_per_s"]["median"]
    assert "tokens/s" in done.stdout


# -- objects around DataLoaders (tests/pipelines/real_adapters.py) and the real libraries' ones ----

ADAPTERS = "real_adapters.py"


def _run_printed(code: str, check: str) -> str:
    """Run printed code as a user would, then ``check`` (Python using ``loader``); its output."""
    done = subprocess.run(
        [sys.executable, "-c", code + "\n" + check],
        cwd=PIPELINES,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize(
    ("target", "path", "batch_type"),
    [
        (f"{ADAPTERS}:proxy_loader", ".inner_loader", "FeatureBatch"),  # passes for a DataLoader
        (f"{ADAPTERS}:multitask_loader", "._flat[0]", "dict"),  # holds it twice, iterates the list
        (
            f"{ADAPTERS}:accelerate_loader",
            ".base_dataloader",
            "list",
        ),  # accelerate's prepared loader
        (f"{ADAPTERS}:lightning_combined", "._flattened[0]", "tuple"),  # Lightning's CombinedLoader
    ],
)
def test_a_wrapper_is_tuned_where_its_loader_really_runs_and_the_code_puts_it_back(
    target, path, batch_type, tmp_path
):
    out = tmp_path / "tune.json"
    done = run_cli(
        "tune", target, "--budget", TUNE_BUDGET, "--emit", "python", "--json", str(out), "--quiet"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["loader_kind"]["name"] == "wrapped-dataloader"
    assert f"at {path.lstrip('.')}" in record["loader_kind"]["description"]
    code = record["loader_code"]
    assert code["verified"], code["reason"]
    factory = target.split(":")[1]
    # The code as emitted for the winner (your factory's call where the verdict keeps yours), and
    # the code with
    # one more worker than yours, which puts a DataLoader back where the wrapper holds it.
    baseline = record["baseline"]["config"]
    more = {**baseline, "num_workers": baseline["num_workers"] + 1, "prefetch_factor": 2}
    for emitted, config in ((done.stdout, code["config"]), (None, more)):
        snippet = snippet_for_record(record, config)
        text = emitted if emitted is not None else render_python(snippet)
        if snippet.changed:
            assert f"yours{path} = DataLoader(" in text and "loader = yours" in text
        else:
            assert text.endswith(f"\nloader = {factory}()\n"), text
        printed = _run_printed(
            text,
            (
                "it = iter(loader)\nfirst = next(it)\nnext(it)\n"
                f"print(type(first).__name__, loader{path}.num_workers)\n" + STOP
            ),
        )
        # the wrapper's own batches, with the code's workers
        assert printed.split() == [batch_type, str(config["num_workers"])]


def test_a_wrapper_that_cannot_take_another_loader_is_measured_and_says_why(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli(
        "bench",
        f"{ADAPTERS}:frozen_copy_loader",
        "--repeats",
        "1",
        "--window",
        "0.4",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(out.read_text())["results"][0]
    assert row["label"] == "as built" and row["samples_per_s"]["median"] > 0
    tuned = run_cli("tune", f"{ADAPTERS}:frozen_copy_loader", "--budget", "5")
    assert tuned.returncode == 2 and "Traceback" not in tuned.stderr
    assert "keeps iterating its own DataLoader" in " ".join(tuned.stderr.split())


def test_a_generator_of_batches_is_made_anew_for_each_measurement(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli(
        "bench", f"{ADAPTERS}:wave_batches", "--repeats", "2", "--window", "0.4", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert len(rows) == 1 and rows[0]["label"] == "as built"
    assert (
        rows[0]["samples_per_s"]["min"] > 0
    )  # both repeats saw batches: the generator was made again
    assert (
        rows[0]["speedup"] is None and rows[0]["efficiency"] is None
    )  # no single-process config to compare
    assert "Single-process cost" not in done.stdout


def test_doctor_on_an_adapter_runs_every_step_on_the_loader_inside(tmp_path):
    done = run_cli(
        "doctor",
        f"{ADAPTERS}:proxy_loader",
        "--budget",
        TUNE_BUDGET,
        "--changes-budget",
        "1",
        "--check-budget",
        "10",  # the probes share it: the test reads that the check ran, not its coverage
        "--num-workers",
        "0,2",  # the sweep: nothing here reads the scaling
        "--repeats",
        "1",  # one sweep pass: nothing here reads the sweep's spread
        "--out",
        str(tmp_path / "r"),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "report.json").read_text())
    assert not record.get("not_run")  # check and stages run on the DataLoader the adapter holds
    assert not [f for f in record.get("findings", []) if f.get("severity") == "error"]
    assert any(row["name"] == "collate" for row in record["stages"])
    assert record["loader_code"]["verified"], record["loader_code"]["reason"]
    assert record["loader_code"]["structure"].startswith(
        "FeatureBatch"
    )  # the adapter's own batches


def _advice_for(spec: str, **knobs):
    """The verified advice for a pick that changes ``knobs`` of the target's own settings."""
    from verified_advice import verified_advice

    return verified_advice(str(PIPELINES / spec), **knobs)


def test_a_loader_its_constructor_cannot_rebuild_gets_its_knobs_set_after_building():
    # PretrainLoader builds its dataset from a tokenizer it does not keep: no constructor call can
    # be written, so the advice sets the knobs on the object the user's factory returns, as
    # trials do.
    code = _advice_for("real_lm_stream.py:make_loader", num_workers=3, prefetch_factor=4)
    assert code["verified"], code["reason"]
    assert (
        "yours.num_workers = 3  # was 2" in code["python"]
        and "yours.prefetch_factor = 4" in code["python"]
    )
    printed = _run_printed(
        code["python"], "it = iter(loader)\nnext(it)\nnext(it)\nprint(loader.num_workers)\n" + STOP
    )
    assert printed.split() == ["3"]


def test_tune_emits_the_form_of_the_code_that_ran():
    # The constructor call cannot be replayed here (it raised TypeError when run); what ran is the
    # knobs set on the factory's object, and --emit python must print that, not the call.
    from stallscope.commands.tune import emitted_text

    spec = "real_lm_stream.py:make_loader"
    code = _advice_for(spec, num_workers=3, prefetch_factor=4)
    assert code["verified"] and code["form"] == "attributes", code
    data = {
        "loader_code": code,
        "best": {"config": code["config"], "samples_per_s": 150.0, "speedup": 1.5, "rounds": 4},
        "baseline": {"config": code["baseline"], "samples_per_s": 100.0},
    }
    from stallscope.target import load_target

    pipeline = load_target(str(PIPELINES / spec))
    data |= {"loader": pipeline.call.to_dict(), "loader_kind": pipeline.kind.to_dict()}
    text = emitted_text(spec, data, "python")
    assert "PretrainLoader(" not in text and "yours.num_workers = 3  # was 2" in text, text
    printed = _run_printed(
        text, "it = iter(loader)\nnext(it)\nnext(it)\nprint(loader.num_workers)\n" + STOP
    )
    assert printed.split() == ["3"]


def test_a_streaming_loader_is_written_without_torchs_placeholder_sampler():
    code = _advice_for("real_streaming_lib.py:make_loader", num_workers=3)
    assert code["verified"], code["reason"]
    assert "StreamingLoader(" in code["python"] and "sampler" not in code["python"]


def test_where_no_form_of_the_advice_runs_each_forms_reason_is_given():
    # The constructor call cannot be replayed (TypeError), and persistent_workers cannot be set on
    # a loader already built: no code is shown, and the reason names both, not the call's alone.
    code = _advice_for("real_lm_stream.py:make_loader", num_workers=3, persistent_workers=True)
    assert not code["verified"] and code["python"] is None
    reason = code["reason"]
    assert reason.startswith("the call: ") and "TypeError" in reason, reason
    assert "; setting the knobs on the loader it builds: " in reason, reason
    assert "persistent_workers" in reason.split("; setting the knobs")[1], reason


def test_a_factory_that_prints_is_heard_once_and_its_later_calls_are_counted(tmp_path):
    """Every trial calls a knob factory again (NOTE [held output]): its progress bar is drawn at
    the first call only, one line counts the rest, and with --emit python what it prints as it
    loads goes to stderr, so stdout is the code alone and runs."""
    out = tmp_path / "tune.json"
    done = run_cli(
        "tune", "printing_factory.py:make_loader", "--budget", TUNE_BUDGET, "--emit", "python",
        "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("Caching dataset: 25%") == 1
    assert done.stderr.count("cache ready") == 1 and "cache ready" not in done.stdout
    notes = [line for line in done.stderr.splitlines() if "your code printed" in line]
    assert len(notes) == 1 and "'Caching dataset: 100%'" in notes[0], done.stderr
    calls = int(notes[0].split("on each of the ")[1].split()[0])
    assert calls >= 2  # the tuner's trials (the baseline at least twice: scan and race)
    code = done.stdout
    compile(code, "emitted", "exec")  # nothing but the code on stdout
    assert "make_loader(" in code and json.loads(out.read_text())["trials"]
