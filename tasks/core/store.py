"""Content-addressed stage outputs: fingerprints, atomic publish, manifests.

A stage writes into ``<root>/<stage>/.<fingerprint>.tmp-<pid>`` and renames it to
``<root>/<stage>/<fingerprint>`` only when complete, with ``_manifest.json`` written last inside
the temporary directory. A directory without a manifest is never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

from .energy import POWER_CSV, EnergyMeter, write_power_csv
from .errors import InvariantBroken
from .secrets import redact

MANIFEST = "_manifest.json"
_CODE_DIRS = ("tasks/core", "gpu_kernels")
_PROJECT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the pure logic's source: a code change invalidates every stage's cache."""
    h = hashlib.sha256()
    for d in _CODE_DIRS:
        for p in sorted((_PROJECT / d).rglob("*.py")):
            h.update(p.relative_to(_PROJECT).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _key_part(obj: Any) -> str:
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(
        f"{type(obj).__name__} cannot be part of a cache key: keys hold data fingerprints, config and the code "
        "version only (never a Spark session, Dask client or other handle)"
    )


def fingerprint(*parts: Any) -> str:
    """Stable hash of JSON-able parts (input fingerprints, config section, code version)."""
    blob = json.dumps(parts, sort_keys=True, default=_key_part).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


_DIGESTS: dict[tuple, str] = {}  # (path, size, mtime, ctime, inode) -> the content hash, for files not changed lately
_DIGESTS_LOCK = threading.Lock()
SETTLED_NS = 2_000_000_000  # a file unchanged this long is hashed once per process (as git's index trusts a stat)


def file_digest(path: Path) -> str:
    """One file's content hash (streamed; bounded memory). A file last changed more than ``SETTLED_NS`` before it is
    hashed keeps its hash in this process while its size, times and inode stay: a run's increment plan and its
    stages hash each export once. A file changed since, or lately (a write within the clock's tick would leave its
    times as they were), is hashed again."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    with _DIGESTS_LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    settled = time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)  # releases the GIL: files hash in parallel (file_digests)
    digest = h.hexdigest()[:20]
    if settled:
        with _DIGESTS_LOCK:
            if len(_DIGESTS) > 100_000:
                _DIGESTS.clear()
            _DIGESTS[key] = digest
    return digest


def file_digests(paths: list[Path], root: Path | None = None) -> dict[str, str]:
    """Each file's content hash by its name (relative to ``root``), the files hashed in parallel."""
    paths = sorted(paths)
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1, len(paths)))) as pool:
        digests = list(pool.map(file_digest, paths))
    return {(p.relative_to(root).as_posix() if root else p.name): d for p, d in zip(paths, digests, strict=True)}


def digests_fingerprint(digests: Mapping[str, str]) -> str:
    """The fingerprint of a set of files from their names and content hashes (:func:`file_digests`)."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(name.encode() + b"\0" + digests[name].encode() + b"\0")
    return h.hexdigest()[:20]


def fingerprint_files(paths: list[Path], root: Path | None = None) -> str:
    """Hash of file names and contents: a set of files that share some files with another shares their digests,
    so an increment (new files beside unchanged ones) is recognised by them."""
    return digests_fingerprint(file_digests(paths, root))


def fingerprint_tree(root: Path) -> str:
    return fingerprint_files([p for p in root.rglob("*") if p.is_file()], root)


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write a file so a reader sees the old content or the whole new one, never a part (temp, fsync, rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")  # threads write too
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def json_safe(data: Any) -> Any:
    """``data`` with every NaN or infinity as ``None``: strict JSON (``null``), which every parser reads; Python's
    default writes bare ``NaN``, which strict parsers (browsers, jq) reject."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def write_json_atomic(path: Path, data: Any, indent: int | None = 2) -> Path:
    return write_atomic(path, json.dumps(data, indent=indent, sort_keys=True, default=str))


def read_manifest(stage_dir: Path) -> Manifest:
    return json.loads((Path(stage_dir) / MANIFEST).read_text())


class Manifest(TypedDict, total=False):
    """Every stage's ``_manifest.json``: the header (``manifest_header``) and the row accounting every stage
    keeps (rows in = rows out + rows quarantined), then the stage's own figures (see each stage)."""

    stage: str
    fingerprint: str
    written_at: str
    input_fingerprints: dict[str, str]
    config: dict[str, Any]
    code_version: str
    seconds: float
    gpu_energy: dict[str, Any]  # the GPUs' joules and watts while it computed (EnergyMeter), or why n/a
    rows_in: int
    rows_out: int
    rows_quarantined: int


@dataclass(frozen=True)
class StageOutput:
    """A stage's published output: where it is, whether this run reused it, and its manifest."""

    stage: str
    fingerprint: str
    path: Path
    cached: bool
    manifest: Manifest

    @property
    def rows_in(self) -> int | None:
        return self.manifest.get("rows_in")

    @property
    def rows_out(self) -> int | None:
        return self.manifest.get("rows_out")

    @property
    def rows_quarantined(self) -> int:
        return self.manifest.get("rows_quarantined", 0)

    @property
    def seconds(self) -> float | None:
        return self.manifest.get("seconds")

    def __getitem__(self, key: str) -> Any:
        return self.manifest[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.manifest.get(key, default)

    @property
    def inputs(self) -> dict[str, str]:
        return self.manifest.get("input_fingerprints") or {}

    def public(self) -> dict[str, Any]:
        """What a run summary shows of the stage."""
        return {
            "status": "completed",
            "cached": self.cached,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "rows_quarantined": self.rows_quarantined,
            "seconds": self.seconds,
            "work_rows": self.manifest.get("work_rows", self.rows_in),  # rows computed (training: x epochs)
            "gpu_energy_j": (self.manifest.get("gpu_energy") or {}).get("joules"),
            "output": str(self.path),
            "fingerprint": self.fingerprint,
        }


StageResult = StageOutput


def stage_dir(root: Path, stage: str, fp: str) -> Path:
    return Path(root) / stage / fp


def completed(root: Path, stage: str, fp: str) -> StageOutput | None:
    d = stage_dir(root, stage, fp)
    if (d / MANIFEST).is_file():
        return StageOutput(stage, fp, d, True, read_manifest(d))
    return None


@contextlib.contextmanager
def staging(root: Path, stage: str, fp: str, replace: bool = False) -> Iterator[Path]:
    """Yield a private temporary directory; publish it by rename when the block completes.

    The caller must write the manifest via :func:`publish_manifest` before leaving the block.
    On error the temporary directory is removed; a killed process leaves only a ``.tmp-`` sibling
    that no reader looks at (and that the next run of the same stage clears). ``replace``: a forced
    recompute supersedes an output already published under the same fingerprint.
    """
    final = stage_dir(root, stage, fp)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*final.parent.glob(f".{fp}.tmp-*"), *final.parent.glob(f".{fp}.old-*")]:
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = final.parent / f".{fp}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if not (tmp / MANIFEST).is_file():
            raise RuntimeError(f"stage {stage}: no manifest written in {tmp}")
        if final.exists() and replace:  # a forced recompute supersedes the earlier output
            old = final.parent / f".{fp}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        elif final.exists():  # another run published the same fingerprint first: identical content
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def staging_into(target: Path) -> Iterator[Path]:
    """Like ``staging`` for a directory the user names: written beside it, renamed into place when complete
    (an earlier directory of that name is replaced)."""
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_manifest(tmp: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    fp = tmp.name[1:].split(".tmp-")[0]  # staging() names the directory .<fingerprint>.tmp-<pid>
    body = {"written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fingerprint": fp, **manifest}
    write_json_atomic(tmp / MANIFEST, body)
    return body


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def published(root: Path, stage: str, fp: str) -> StageOutput:
    """The output this run just published (``cached=False``)."""
    d = stage_dir(root, stage, fp)
    return StageOutput(stage, fp, d, False, read_manifest(d))


def check_rows(stage: str, body: Mapping[str, Any]) -> None:
    """The stage contract: rows in = rows out + rows quarantined, checked once for every stage."""
    rows_in, rows_out = body.get("rows_in"), body.get("rows_out")
    if rows_in is None or rows_out is None:
        return
    quarantined = body.get("rows_quarantined") or 0
    if rows_in != rows_out + quarantined:
        raise InvariantBroken(
            f"stage {stage} lost rows: {rows_in} in != {rows_out} out + {quarantined} quarantined "
            f"({rows_in - rows_out - quarantined} unaccounted for)"
        )


def manifest_header(stage: str, inputs: Mapping[str, str], config: Any, seconds: float) -> Manifest:
    """What every stage manifest starts with: inputs, the config section, the code version, timing."""
    return {
        "stage": stage,
        "input_fingerprints": dict(inputs),
        "config": redact(config.model_dump(mode="json") if hasattr(config, "model_dump") else config),
        "code_version": code_version(),
        "seconds": round(seconds, 3),
    }


def stage_fingerprint(stage: str, inputs: Mapping[str, str], config: Any, *key: Any) -> str:
    """A stage's cache key: its inputs' fingerprints, its config section, anything else its output depends on
    (``key``: e.g. the dataframe backend or training device) and the code version."""
    section = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    return fingerprint(stage, dict(inputs), section, *key, code_version())


def run_stage(
    root: Path,
    stage: str,
    inputs: Mapping[str, str],
    config: Any,
    compute: Callable[[Path], dict[str, Any]],
    *,
    key: tuple[Any, ...] = (),
    force: bool = False,
    verify: Callable[[], None] | None = None,
) -> StageOutput:
    """The store protocol, once for every stage: fingerprint -> reuse a published output (unless ``force``) ->
    else ``compute(tmp)`` in a private staging directory, which returns the manifest's body -> ``verify()`` that
    the inputs read are still the fingerprinted ones -> check the row identity -> write the manifest -> publish
    by rename. Nothing half-written is ever visible."""
    fp = stage_fingerprint(stage, inputs, config, *key)
    if not force and (done := completed(root, stage, fp)) is not None:
        return done
    with staging(root, stage, fp, replace=force) as tmp:
        started = time.perf_counter()
        with EnergyMeter() as meter:  # the GPUs' energy while this stage computes (n/a on a CPU host)
            body = compute(tmp)
        seconds = time.perf_counter() - started
        if verify is not None:
            verify()
        check_rows(stage, body)
        energy = meter.result()
        if energy["available"]:
            write_power_csv(tmp / POWER_CSV, meter.samples)
        publish_manifest(tmp, {**manifest_header(stage, inputs, config, seconds), "gpu_energy": energy, **body})
    return published(root, stage, fp)


def file_url(path: str | Path | None) -> str | None:
    """The http URL of a file in the store, where `make ui`'s file server serves it (FAULTLINE_FILES_URL over
    FAULTLINE_FILES_DIR); None when no server serves that path."""
    base, served = os.environ.get("FAULTLINE_FILES_URL"), os.environ.get("FAULTLINE_FILES_DIR")
    if not (path and base and served):
        return None
    try:
        rel = Path(path).resolve().relative_to(Path(served).resolve())
    except ValueError:
        return None
    return f"{base.rstrip('/')}/{quote(rel.as_posix())}"
