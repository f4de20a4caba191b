"""Tracking through an outage: a tracker that journals what it cannot deliver, and the replay of the journal.

``ResilientTracker`` has the ``Tracker`` methods. While the server answers, calls go through (each bounded by
MLflow's timeout and retry settings, see ``tracking.py``). When one fails and a probe of the server's
``/health`` fails too, the tracker goes offline for the rest of the run: that call and every later one are
appended to ``<spool>/<id>/journal.jsonl`` (with copies of the files they upload and their wall-clock times),
and a run started offline gets a provisional id. ``replay`` sends a journal to the server in order, mapping
provisional ids to real ones, and records its progress line by line, so a replay cut off by a second outage
resumes where it stopped and never creates a run twice.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .secrets import redact_text
from .store import write_json_atomic

log = logging.getLogger("faultline.tracking")
JOURNAL, PROGRESS, DONE = "journal.jsonl", "progress.json", "replayed.json"
PROVISIONAL = "spooled-"
IDS = "ids.json"  # provisional -> real run ids over all journals (a crash mark may name another run's id)
PROBE_TIMEOUT_S = 5.0
# the Tracker methods that write to a run (journaled while the server is down)
TRACKED = frozenset(
    ("start_run", "log_params", "log_metrics", "set_tags", "log_input", "log_artifact", "log_artifacts",
     "log_served_model", "end_run", "reopen_run")
)  # fmt: skip


def unreachable(uri: str, timeout: float | None = None) -> str | None:
    """None when the tracking server answers (or the store is local); else why not, credentials masked."""
    if not uri.startswith(("http://", "https://")):
        return None
    import requests

    try:
        r = requests.get(uri.rstrip("/") + "/health", timeout=timeout or PROBE_TIMEOUT_S)
    except requests.RequestException as exc:
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))  # the cause, not urllib3's wrapping
        return redact_text(f"{type(exc).__name__}: {errno.group(0) if errno else exc}")[:300]
    return f"HTTP {r.status_code} from /health" if r.status_code >= 500 else None


def strict_rejection(uri: str, why: str) -> ConfigError:
    return ConfigError(
        f"mlflow.tracking_uri {redact_text(uri)}: the tracking server is unreachable ({why}); mlflow.strict=true "
        "runs only with tracking: start the server, or set mlflow.strict=false to journal the run's tracking and "
        "replay it when the server is back"
    )


def require_server(uri: str) -> None:
    """``mlflow.strict``: reject the run before anything starts when its tracking server does not answer."""
    if (why := unreachable(uri)) is not None:
        raise strict_rejection(uri, why)


class Journal:
    """One run's undelivered calls: ``<spool>/<id>/journal.jsonl`` plus ``files/`` (copies of uploads)."""

    def __init__(self, spool: Path, experiment: str, uri: str, why: str) -> None:
        self.dir = Path(spool) / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        (self.dir / "files").mkdir(parents=True)
        self.n = 0
        self.append("open", {"experiment": experiment, "uri": redact_text(uri), "why": why})

    def append(self, method: str, kwargs: dict[str, Any]) -> None:
        line = json.dumps({"method": method, "at_ms": int(time.time() * 1000), "kwargs": kwargs}, default=str)
        with open(self.dir / JOURNAL, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def keep(self, path: Path) -> str:
        """A copy of an upload (the run may delete or rewrite its file before the replay)."""
        self.n += 1
        dest = self.dir / "files" / str(self.n) / Path(path).name
        dest.parent.mkdir(parents=True)
        (shutil.copytree if Path(path).is_dir() else shutil.copy2)(path, dest)
        return str(dest.relative_to(self.dir))


class ResilientTracker:
    """A ``Tracker`` that survives a tracking outage by journaling (see the module doc)."""

    def __init__(self, make: Callable[[], Any], uri: str, experiment: str, spool: Path, strict: bool = False):
        self._make, self.uri, self.experiment, self.spool, self.strict = make, uri, experiment, Path(spool), strict
        self.real: Any = None
        self.journal: Journal | None = None
        self._why: str | None = None
        self._begun = False

    # ------------------------------------------------------------ state
    @property
    def offline(self) -> str | None:
        """Why this run's tracking is journaled (None: it goes to the server)."""
        return self._why

    def begin(self) -> None:
        """At a run's start: reach the server (replaying what earlier runs journaled), or go offline / reject."""
        self._why, self.journal, self._begun = None, None, True
        why = unreachable(self.uri)
        if why is None:
            try:
                self.real = self.real or self._make()
            except Exception as exc:
                why = unreachable(self.uri)
                if why is None:
                    raise
                log.debug("tracker creation failed: %s", exc)
        if why is not None:
            if self.strict:
                raise strict_rejection(self.uri, why)
            self._offline(why)
            return
        self._replay_pending()

    def _offline(self, why: str) -> None:
        self._why = why
        self.journal = Journal(self.spool, self.experiment, self.uri, why)
        log.warning(
            "MLflow tracking server %s unreachable (%s): this run's tracking is journaled in %s and replayed when "
            "the server is back (at the run's end, the next run's start, or `faultline tracking replay`)",
            redact_text(self.uri),
            why,
            self.journal.dir,
        )

    def _replay_pending(self) -> list[dict[str, Any]]:
        """Replay every journal not yet delivered (``begin`` has just reached the server); the outcome of each."""
        out = []
        for j in pending(self.spool, exclude=self.journal.dir if self.journal else None):
            try:
                out.append(replay(j, self._tracker_for))
            except Exception as exc:  # the next run or `faultline tracking replay` tries again
                log.warning("tracking journal %s not replayed yet: %s", j, redact_text(str(exc))[:300])
                out.append({"journal": str(j), "error": redact_text(str(exc))[:300]})
        return out

    def _tracker_for(self, experiment: str) -> Any:
        if experiment == self.experiment:
            return self.real
        from .tracking import Tracker

        return Tracker(self.uri, experiment, getattr(self.real, "artifact_root", None))

    def finish(self) -> list[dict[str, Any]]:
        """At a run's end: if its calls were journaled and the server is back, deliver them now."""
        if self.journal is None:
            return []
        done = self.journal.dir
        self.journal, self._why = None, None
        if unreachable(self.uri) is not None:
            return []
        try:
            self.real = self.real or self._make()
            return [replay(done, self._tracker_for)]
        except Exception as exc:
            log.warning("tracking journal %s not replayed yet: %s", done, redact_text(str(exc))[:300])
            return []

    # ------------------------------------------------------------ the Tracker methods
    def _call(self, method: str, **kwargs: Any) -> Any:
        if not self._begun:
            self.begin()
        if self._why is None and self.real is not None:
            try:
                return getattr(self.real, method)(**kwargs)
            except Exception:
                why = unreachable(self.uri)
                if why is None:
                    raise  # the server answers: a real error
                self._offline(f"{why} (at {method})")
        return self._journal(method, kwargs)

    def _journal(self, method: str, kwargs: dict[str, Any]) -> Any:
        assert self.journal is not None
        now = int(time.time() * 1000)
        if method == "start_run":
            kwargs = {**kwargs, "start_time_ms": now, "provisional": PROVISIONAL + uuid.uuid4().hex}
        if method in ("log_artifact", "log_artifacts", "log_served_model"):
            kwargs = {**kwargs, "path": self.journal.keep(kwargs["path"])}
        if method == "log_metrics":
            kwargs = {**kwargs, "timestamp_ms": now}
        if method == "end_run":
            kwargs = {**kwargs, "end_time_ms": now}
        if method == "log_served_model":
            import torch

            rel = f"files/model-{uuid.uuid4().hex[:8]}.pt"
            torch.save({"model": kwargs.pop("model"), "example": kwargs.pop("example")}, self.journal.dir / rel)
            kwargs["saved"] = rel
        self.journal.append(method, kwargs)
        return kwargs.get("provisional")

    @property
    def experiment_id(self) -> str | None:
        if not self._begun:
            self.begin()
        return self.real.experiment_id if self.real is not None and self._why is None else None

    @property
    def client(self) -> Any:
        if not self._begun:
            self.begin()
        if self.real is None:
            raise RuntimeError(f"MLflow tracking server {redact_text(self.uri)} unreachable ({self._why})")
        return self.real.client

    def __getattr__(self, method: str) -> Callable[..., Any]:
        """``start_run``, ``log_metrics``, ... ``reopen_run``: the ``Tracker`` method of that name, with its own
        signature; its arguments are bound to their names (what a journal line records)."""
        if method not in TRACKED:
            raise AttributeError(method)
        signature = _tracked_signature(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(None, *args, **kwargs).arguments
            bound.pop("self")
            return self._call(method, **bound)

        return call


@functools.cache
def _tracked_signature(method: str) -> inspect.Signature:
    from .tracking import Tracker

    return inspect.signature(getattr(Tracker, method))


def pending(spool: Path, exclude: Path | None = None) -> list[Path]:
    """Journals not yet (fully) delivered, oldest first."""
    return [
        j.parent
        for j in sorted(Path(spool).glob(f"*/{JOURNAL}"))
        if not (j.parent / DONE).exists() and j.parent != exclude
    ]


def replay(journal_dir: Path, tracker_for: Callable[[str], Any]) -> dict[str, Any]:
    """Deliver one journal in order; returns ``{"journal", "runs": {provisional: real}, "calls"}``."""
    journal_dir = Path(journal_dir)
    lines = [json.loads(x) for x in (journal_dir / JOURNAL).read_text().splitlines() if x.strip()]
    state = json.loads((journal_dir / PROGRESS).read_text()) if (journal_dir / PROGRESS).exists() else {}
    known_file = journal_dir.parent / IDS
    known = json.loads(known_file.read_text()) if known_file.exists() else {}
    ids: dict[str, str] = state.get("runs", {})
    skipped = state.get("skipped", [])
    done = int(state.get("done", 1))  # line 0 is the header
    tr = tracker_for(lines[0]["kwargs"]["experiment"])
    for i in range(done, len(lines)):
        kw = dict(lines[i]["kwargs"])
        if kw.get("run_id", "").startswith(PROVISIONAL) and kw["run_id"] not in {**known, **ids}:
            skipped.append(f"{lines[i]['method']} of run {kw['run_id']}: never started in any journal")
        else:
            _deliver(tr, lines[i]["method"], kw, {**known, **ids}, ids, journal_dir)
        write_json_atomic(journal_dir / PROGRESS, {"done": i + 1, "runs": ids, "skipped": skipped})
        if lines[i]["method"] == "start_run":
            known = {**known, **ids}
            write_json_atomic(known_file, known)
    result = {
        "journal": str(journal_dir),
        "runs": ids,
        "calls": len(lines) - 1,
        "skipped": skipped,
        "replayed_at": time.time(),
    }
    write_json_atomic(journal_dir / DONE, result)
    log.warning("replayed tracking journal %s: %d calls, runs %s", journal_dir, len(lines) - 1, ids)
    return result


def _deliver(tr: Any, method: str, kw: dict[str, Any], known: dict[str, str], ids: dict[str, str], base: Path) -> None:
    if method == "start_run":
        ids[kw["provisional"]] = tr.start_run(kw["name"], kw["tags"], start_time_ms=kw["start_time_ms"])
        return
    kw["run_id"] = known.get(kw["run_id"], kw["run_id"])
    if "path" in kw:
        kw["path"] = base / kw["path"]
    if method == "log_served_model":
        import torch

        saved = torch.load(base / kw.pop("saved"), weights_only=False)
        kw.update(model=saved["model"], example=saved["example"])
    got = getattr(tr, method)(**kw)
    if method == "log_served_model" and got and kw.get("registered_name"):  # the tag the live run would have had
        tr.set_tags(kw["run_id"], {"registered_model": f"{kw['registered_name']}/{got}"})
