"""Where a training launch's time goes besides its epochs: each rank's marks from its process's start (the
imports, the communicator, the CUDA context, the tensors, the model, the first collective, the loop, the save), and
the stage's account of the launch around rank 0's (the launcher before it, the shutdown after)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class Timeline:
    """Wall-clock marks of this rank's life from its process's start, and summed parts of the epoch loop: where a
    training stage's time goes besides its epochs (rank 0 writes them to ``timeline.json``)."""

    def __init__(self, imported: float, started: float | None = None, prewarm: dict | None = None) -> None:
        """``imported``: when the rank's module finished its imports; ``started``: when the rank's life as this
        launch's began (default: its process's start; a process started ahead of the launch, :mod:`prewarm`, begins
        when its spec arrives, and ``prewarm`` says what it did before)."""
        self.marks = {"process_start": started or self.process_start(), "imports": imported}
        self.sums: dict[str, float] = {}
        self.prewarm = prewarm
        self.notes: dict[str, Any] = {}  # what the rank chose on the way (e.g. the GRU's kernel), with its reasons

    @staticmethod
    def process_start() -> float:
        """This process's start on the wall clock, to a clock tick (10 ms): its start in ticks since boot
        (/proc/self/stat) against the time since boot now. psutil's figure rests on the boot time in whole seconds,
        up to a second off (a launcher part of -0.58 s read so); it stays where /proc is not Linux's."""
        import os

        try:
            fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(fields[19])  # field 22, starttime: the 20th after the command's closing parenthesis
            since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
            return time.time() - since
        except (OSError, ValueError, IndexError, AttributeError):
            import psutil

            return psutil.Process().create_time()

    def mark(self, name: str) -> None:
        """The part ``name`` ends now (it began at the previous mark)."""
        self.marks[name] = time.time()

    def add(self, name: str, since: float) -> None:
        """Adds the seconds since ``since`` to the summed part ``name``."""
        self.sums[name] = self.sums.get(name, 0.0) + time.time() - since

    def parts(self) -> dict[str, Any]:
        names = list(self.marks)
        parts = {b: round(self.marks[b] - self.marks[a], 3) for a, b in zip(names, names[1:])}
        out = {"process_start": self.marks["process_start"], "parts_s": parts,
               "loop_s": {k: round(v, 3) for k, v in self.sums.items()}}  # fmt: skip
        out = {**out, "notes": self.notes} if self.notes else out
        return {**out, "prewarm": self.prewarm} if self.prewarm else out


def rank_timeline(path: Path, launched: float, ended: float) -> dict[str, Any] | None:
    """Rank 0's parts (``timeline.json``) with the launcher's before them (the launch until rank 0's process
    started) and the shutdown after (its model saved until every rank exited): the stage's launch, whole."""
    if not path.is_file():  # a rank that failed before writing it
        return None
    t = json.loads(path.read_text())
    saved = t["process_start"] + sum(t["parts_s"].values())
    parts = {"launcher": round(t["process_start"] - launched, 3), **t["parts_s"], "shutdown": round(ended - saved, 3)}
    extra = {k: t[k] for k in ("notes", "prewarm") if t.get(k)}
    return {"parts_s": parts, "loop_s": t["loop_s"], **extra}
