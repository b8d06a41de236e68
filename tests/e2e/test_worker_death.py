"""A worker that dies (exit code 3, or SIGKILL as the OOM killer does) gives exit 2 and one
sentence, every time.

torch notices a dead worker in several ways depending on timing (NOTE [worker death]
in runtime/processes.py); 30 runs in a row catch the rare ones. In-process through
each command's ``main(argv)`` so the loop stays fast.
"""

from __future__ import annotations

import pytest

from stallscope.commands import bench, stages

RUNS = 30


def _one_sentence(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 3, err


@pytest.mark.parametrize("target", ["dies_in_worker", "killed_in_worker"])
def test_bench_worker_death_exits_2_every_time(pipelines_dir, capsys, target):
    runs = RUNS if target == "dies_in_worker" else 5
    codes = []
    for _ in range(runs):
        code = bench.main(
            [
                f"{pipelines_dir}/bench_errors.py:{target}",
                "--num-workers",
                "2",
                "--repeats",
                "1",
                "--window",
                "0.2",
                "--timeout",
                "20",
                "--quiet",
            ]
        )
        err = capsys.readouterr().err
        codes.append(code)
        assert code == 2, err
        assert "a DataLoader worker died" in " ".join(err.split()), err
        _one_sentence(err)
    assert codes == [2] * runs


def test_stages_worker_death_exits_2_with_one_sentence(pipelines_dir, capsys):
    for _ in range(3):
        code = stages.main([f"{pipelines_dir}/bench_errors.py:dies_in_worker", "--quiet"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "a DataLoader worker died" in " ".join(err.split()), err
        _one_sentence(err)


def test_check_reports_a_dying_worker_as_a_finding_not_a_traceback(pipelines_dir, capsys):
    from stallscope.commands import check

    code = check.main(
        [
            f"{pipelines_dir}/bench_errors.py:dies_in_worker",
            "--budget",
            "6",
            "--only",
            "getitem-error",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1, captured.err  # an error finding, not a crash of the command
    assert "Traceback" not in captured.err + captured.out
    assert "The worker process died while fetching" in " ".join(captured.out.split())
