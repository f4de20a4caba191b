"""A training rank started ahead of its launch: one rank on this host (the launch that needs no launcher) can
start while the features are computed, so that its imports (torch, Horovod, cuDF, what the optimizer imports) are
done when training begins. The process imports, then waits on its stdin for the launch: one JSON line with the
spec's path and the launch's whole environment (the tracking URI among it: through the pipe, never a file).

``python -m tasks.core.training.prewarm`` is that process; :func:`prewarm` starts one for a flow run's coming
training and :func:`take` hands it to the launch of a rank with the threads it was started for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.core.training.procs import kill_tree, pdeathsig

PROJECT = str(Path(__file__).resolve().parents[3])
_WAITING: dict[int, subprocess.Popen] = {}  # by the rank's threads (read at import): at most one a flow run


def rank_env(threads_per_rank: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A rank's environment: this process's, ``extra`` (the launch's), the project on the path and the rank's
    threads (read at import: a rank started ahead has them from its start, the rest comes with its spec)."""
    return {**os.environ, **(extra or {}), "PYTHONPATH": PROJECT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": str(threads_per_rank)}  # fmt: skip


@contextmanager
def prewarmed(threads_per_rank: int, wanted: bool) -> Iterator[None]:
    """Within: a rank's process started now (``wanted``), for the launch to take; one it did not take (a cached
    training, a failed stage before it) is ended on exit."""
    if wanted:
        prewarm(threads_per_rank)
    try:
        yield
    finally:
        discard()


def prewarm(threads_per_rank: int) -> subprocess.Popen:
    discard()
    proc = subprocess.Popen([sys.executable, "-m", "tasks.core.training.prewarm"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=rank_env(threads_per_rank),
                            text=True, preexec_fn=pdeathsig(), cwd=PROJECT)  # fmt: skip
    _WAITING[threads_per_rank] = proc
    return proc


def take(threads_per_rank: int, spec_path: Path, env: dict[str, str]) -> subprocess.Popen | None:
    """The waiting rank started for ``threads_per_rank`` threads, now given its spec and the launch's whole
    environment ``env``; None where none waits (or it died)."""
    proc = _WAITING.pop(threads_per_rank, None)
    if proc is None or proc.poll() is not None:
        return None
    try:
        proc.stdin.write(json.dumps({"spec": str(spec_path), "env": env}) + "\n")
        proc.stdin.close()
    except OSError:  # it died between the poll and the write
        proc.kill()
        proc.wait()
        return None
    return proc


def discard() -> None:
    """End every rank process that waits for a launch."""
    while _WAITING:
        _, proc = _WAITING.popitem()
        kill_tree(proc)  # it holds nothing yet but its imports


def _imports() -> None:
    """What a rank imports on its way (horovod at its communicator, the optimizer's, cuDF at its tensors' build)."""
    import importlib

    for name in ("horovod.torch", "torch._dynamo", "cudf", "cupy"):
        try:
            importlib.import_module(name)
        except ImportError:  # a CPU host: no cuDF, no CuPy
            pass


def main() -> int:
    from tasks.core.training import worker
    from tasks.core.training.comm import exit_now
    from tasks.core.training.timeline import Timeline

    _imports()
    imported = time.time()
    line = sys.stdin.readline()
    if not line.strip():  # nothing to train: the flow discarded this process
        return 0
    launch = json.loads(line)
    os.environ.clear()  # the launch's environment, as a process it started would have
    os.environ.update(launch["env"])
    arrived = time.time()
    timeline = Timeline(arrived, started=arrived, prewarm={"imports_s": round(imported - Timeline.process_start(), 3),
                                                           "waited_s": round(arrived - imported, 3)})  # fmt: skip
    exit_now(worker.main(launch["spec"], timeline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
