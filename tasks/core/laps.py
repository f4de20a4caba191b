"""Seconds of each part of a stage, for its manifest: where the stage's time goes."""

from __future__ import annotations

import time


class Laps:
    """Seconds of each part of a computation, in order: ``lap(name)`` closes the part that ends now."""

    def __init__(self) -> None:
        self.start, self.seconds = time.perf_counter(), {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.start, 3)
        self.start = now


class SyncedLaps(Laps):
    """Laps of GPU work: with ``gpu``, each lap first waits for the work queued on the current CUDA device (CuPy's
    view of it), so that a part's seconds are its own and not the next part's."""

    def __init__(self, gpu: bool) -> None:
        super().__init__()
        self.gpu = gpu

    def __call__(self, name: str) -> None:
        if self.gpu:
            import cupy

            cupy.cuda.Device().synchronize()
        super().__call__(name)
