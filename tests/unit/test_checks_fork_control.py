"""The thread census and the fresh-interpreter control of NOTE [fork after use]."""

from __future__ import annotations

import threading

from stallscope.checks.fork_control import loadable_target, run_control, threads_here


def _running(*names: str) -> tuple[list[threading.Thread], threading.Event]:
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, name=n, daemon=True) for n in names]
    for t in threads:
        t.start()
    return threads, stop


def test_the_census_names_a_librarys_threads_by_name_and_count_and_leaves_out_ours():
    # Names no other test's threads take: a test that used fork_after_use's engine leaves its
    # "engine-loop" thread running in this process.
    threads, stop = _running(
        "census-loop", "census-pool-0", "census-pool-1", "stallscope-probe", "Thread-7"
    )
    try:
        names = threads_here()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert "census-loop" in names and "census-pool ×2" in names
    assert not [n for n in names if n.startswith(("stallscope-", "Thread-", "MainThread"))]


def test_only_a_target_spec_can_be_loaded_by_a_fresh_interpreter():
    assert loadable_target("pipe.py:make_loader") and loadable_target("pkg.mod:build")
    assert not loadable_target("make_loader") and not loadable_target("<object>")


def test_the_control_fetches_the_item_in_a_worker_a_fresh_interpreter_forked(
    pipelines_dir, tmp_path
):
    # This process has used the engine, so its own forked workers would hang; the control's
    # fresh interpreter never did, so its worker starts an engine of its own and returns.
    import fork_after_use

    fork_after_use.engine().run(lambda: None)
    result = run_control(
        f"{pipelines_dir / 'fork_after_use.py'}:make_loader",
        5,
        iterable=False,
        timeout=20.0,
        batch_size=4,
        workdir=tmp_path,
    )
    assert result["returned"] is True and result["seconds"] is not None, result
