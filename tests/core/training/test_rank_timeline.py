"""The train stage's account of a launch: the launcher, rank 0's parts, the shutdown."""

import json

import pytest


def test_the_stage_puts_the_launcher_before_rank_0s_parts_and_the_shutdown_after(tmp_path):
    from tasks.core.training.timeline import rank_timeline

    parts = {"imports": 2.0, "comm_init": 0.5, "loop": 10.0, "save": 0.25}
    (tmp_path / "timeline.json").write_text(json.dumps({"process_start": 103.0, "parts_s": parts, "loop_s": {}}))
    t = rank_timeline(tmp_path / "timeline.json", launched=100.0, ended=117.0)
    assert t["parts_s"] == {"launcher": 3.0, **parts, "shutdown": 1.25}
    assert sum(t["parts_s"].values()) == pytest.approx(17.0)  # the launch's wall time, whole
    assert rank_timeline(tmp_path / "missing.json", 0.0, 1.0) is None


def test_a_rank_exits_with_its_code_and_its_output_flushed_without_teardown():
    """The ranks leave through ``exit_now`` (no interpreter finalization, where Gloo's threads can abort a rank that
    finished): what they printed still arrives, and the exit code is theirs; an atexit hook does not run."""
    import subprocess
    import sys

    code = (
        "import atexit; from tasks.core.training.comm import exit_now\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "print('epoch 3 done', end='')\n"
        "exit_now(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and proc.stdout == "epoch 3 done", (proc.returncode, proc.stdout, proc.stderr[-500:])


def test_a_process_start_is_read_to_a_clock_tick_and_never_after_its_launch():
    """A child started now reads its own start between its launch and its first line, to a clock tick (psutil's
    figure may be a second off: the boot time it rests on is whole seconds)."""
    import subprocess
    import sys
    import time

    launched = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "import time; from tasks.core.training.timeline import Timeline as T; "
         "print(T.process_start(), time.time())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    start, running = map(float, out.stdout.split())
    assert launched - 0.02 <= start <= running
