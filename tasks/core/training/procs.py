"""The child processes training starts: tied to the stage's process (they die with it) and ended with all they
started."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time


def _prctl():
    """Linux's prctl through ctypes, or None where there is none."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> None:
    """Asks Linux to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG; nothing where there is no prctl):
    a worker process's start, so that a killed run leaves none behind."""
    prctl = _prctl()
    if prctl is not None:
        prctl(1, signal.SIGKILL)


def pdeathsig():
    """A pre-exec hook (loaded here, in the parent: the forked child must not import) that asks Linux to
    SIGKILL the launcher when the stage's process dies, and gives it a process group of its own."""
    prctl = _prctl()

    def hook() -> None:
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        os.setsid()

    return hook


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher, its process group and every descendant (ranks may start their own groups)."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for k in kids:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)


def watch_owner(pid: int | None, every: float = 1.0) -> None:
    """End this rank when the process that launched the training is gone (SIGKILL, OOM): no orphans."""
    if not pid:
        return

    def run() -> None:
        while True:
            time.sleep(every)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(137)
            except PermissionError:  # alive, another user's
                continue

    threading.Thread(target=run, daemon=True, name="owner-watch").start()
