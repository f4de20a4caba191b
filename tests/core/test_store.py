import json
import math

import pytest

from tasks.core.store import (
    MANIFEST,
    completed,
    file_url,
    fingerprint,
    json_safe,
    publish_manifest,
    staging,
    write_json_atomic,
)


def test_fingerprint_is_stable_and_sensitive():
    assert fingerprint("a", {"x": 1, "y": 2}) == fingerprint("a", {"y": 2, "x": 1})
    assert fingerprint("a", {"x": 1}) != fingerprint("a", {"x": 2})


def test_staging_publishes_only_when_complete(tmp_path):
    with staging(tmp_path, "stage", "fp1") as tmp:
        (tmp / "data.txt").write_text("ok")
        assert completed(tmp_path, "stage", "fp1") is None  # nothing visible yet
        publish_manifest(tmp, {"rows_out": 1})
    done = completed(tmp_path, "stage", "fp1")
    assert done is not None and (done.path / "data.txt").read_text() == "ok"
    assert done.manifest["rows_out"] == 1


def test_failed_stage_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with staging(tmp_path, "stage", "fp2") as tmp:
            (tmp / "half.txt").write_text("half")
            raise RuntimeError("boom")
    assert completed(tmp_path, "stage", "fp2") is None
    assert list((tmp_path / "stage").iterdir()) == []


def test_missing_manifest_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="no manifest"):
        with staging(tmp_path, "stage", "fp3") as tmp:
            (tmp / "x").write_text("x")
    assert not (tmp_path / "stage" / "fp3" / MANIFEST).exists()


def test_stale_tmp_of_dead_process_is_cleared(tmp_path):
    stale = tmp_path / "stage" / ".fp4.tmp-999999999"
    stale.mkdir(parents=True)
    with staging(tmp_path, "stage", "fp4") as tmp:
        publish_manifest(tmp, {})
    assert not stale.exists()


def test_sigkilled_writer_leaves_nothing_visible(tmp_path):
    """A writer killed mid-stage leaves only a hidden temporary that no reader looks at; the next run clears it."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from tasks.core.store import staging\n"
        "with staging(Path(sys.argv[1]), 'ingest', 'fpk') as tmp:\n"
        "    (tmp / 'part-0.parquet').write_bytes(b'half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)])
    assert proc.returncode == -9
    assert completed(tmp_path, "ingest", "fpk") is None
    assert not (tmp_path / "ingest" / "fpk").exists()
    assert [p.name.startswith(".fpk.tmp-") for p in (tmp_path / "ingest").iterdir()] == [True]
    with staging(tmp_path, "ingest", "fpk") as tmp:
        publish_manifest(tmp, {})
    assert [p.name for p in (tmp_path / "ingest").iterdir()] == ["fpk"]


def test_handles_never_enter_a_cache_key():
    import threading
    from pathlib import Path

    import pytest

    from tasks.core.store import fingerprint

    assert fingerprint("features", {"windows": [3, 12]}, Path("/x")) == fingerprint(
        "features", {"windows": [3, 12]}, "/x"
    )
    with pytest.raises(TypeError, match="cannot be part of a cache key"):
        fingerprint("ingest", threading.Lock())  # stands in for a SparkSession / Dask Client


def test_file_url_only_for_what_the_file_server_serves(tmp_path, monkeypatch):
    docs = tmp_path / "store" / "validate" / "ab cd" / "index.html"
    assert file_url(docs) is None  # no `make ui` file server
    monkeypatch.setenv("FAULTLINE_FILES_URL", "http://127.0.0.1:8123/")
    monkeypatch.setenv("FAULTLINE_FILES_DIR", str(tmp_path))
    assert file_url(docs) == "http://127.0.0.1:8123/store/validate/ab%20cd/index.html"
    assert file_url(tmp_path.parent / "elsewhere.html") is None  # outside the served directory
    assert file_url(None) is None


def test_undefined_figures_are_written_as_strict_json_null(tmp_path):
    data = {"ece": float("nan"), "runs": [1.5, float("inf"), {"x": -math.inf}], "n": 3, "ok": True, "s": "nan"}
    out = write_json_atomic(tmp_path / "r.json", json_safe(data))

    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    back = json.loads(out.read_text(), parse_constant=reject)  # a strict parser's view
    assert back == {"ece": None, "runs": [1.5, None, {"x": None}], "n": 3, "ok": True, "s": "nan"}


def test_file_digests_hash_in_parallel_and_give_each_files_content_hash(tmp_path):
    import hashlib

    from tasks.core.store import file_digests

    files = []
    for i in range(12):
        (f := tmp_path / "kpi" / f"day{i:02d}.csv").parent.mkdir(exist_ok=True)
        f.write_bytes(bytes([i]) * (5 << 20) + b"tail")  # past one 4 MiB read
        files.append(f)
    got = file_digests(list(reversed(files)), tmp_path)
    assert list(got) == [f"kpi/day{i:02d}.csv" for i in range(12)]  # by name, in order
    assert all(
        got[f"kpi/day{i:02d}.csv"] == hashlib.sha256(f.read_bytes()).hexdigest()[:20] for i, f in enumerate(files)
    )


def test_a_settled_file_is_hashed_once_and_a_changed_or_fresh_one_again(tmp_path, monkeypatch):
    import os

    from tasks.core import store

    opened: list[str] = []
    real_open = open
    monkeypatch.setattr(store, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k), raising=False)
    monkeypatch.setattr(store, "_DIGESTS", {})
    old, fresh = tmp_path / "old.csv", tmp_path / "fresh.csv"
    old.write_text("a,b\n1,2\n")
    fresh.write_text("a,b\n1,2\n")
    os.utime(old, ns=(1_000_000_000, 1_000_000_000))  # changed long ago; its ctime is now, though:
    monkeypatch.setattr(store, "SETTLED_NS", 0)  # ... here any file older than now counts as settled
    first = store.file_digest(old)
    assert store.file_digest(old) == first and opened == [str(old)]  # the second read from the kept hash
    old.write_text("a,b\n1,3\n")  # same size, new bytes: its times change, so it is hashed again
    assert store.file_digest(old) != first and opened == [str(old)] * 2
    monkeypatch.setattr(store, "SETTLED_NS", 10**18)  # nothing is settled: a write within the clock's tick
    store.file_digest(fresh), store.file_digest(fresh)  # could leave a fresh file's times as they were
    assert opened.count(str(fresh)) == 2
