"""Content-addressed stage outputs: fingerprints, atomic publish, manifests.

A stage writes into ``<root>/<stage>/.<fingerprint>.tmp-<pid>`` and renames it to
``<root>/<stage>/<fingerprint>`` only when complete, with ``_manifest.json`` written last inside
the temporary directory. A directory without a manifest is never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

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


def fingerprint_files(paths: list[Path], root: Path | None = None) -> str:
    """Hash of file names and contents (streamed; bounded memory)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        name = p.relative_to(root).as_posix() if root else p.name
        h.update(name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:20]


def fingerprint_tree(root: Path) -> str:
    return fingerprint_files([p for p in root.rglob("*") if p.is_file()], root)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(stage_dir: Path) -> dict[str, Any]:
    return json.loads((Path(stage_dir) / MANIFEST).read_text())


@dataclass(frozen=True)
class StageOutput:
    stage: str
    fingerprint: str
    path: Path
    cached: bool
    manifest: dict[str, Any]


def stage_dir(root: Path, stage: str, fp: str) -> Path:
    return Path(root) / stage / fp


def completed(root: Path, stage: str, fp: str) -> StageOutput | None:
    d = stage_dir(root, stage, fp)
    if (d / MANIFEST).is_file():
        return StageOutput(stage, fp, d, True, read_manifest(d))
    return None


@contextlib.contextmanager
def staging(root: Path, stage: str, fp: str) -> Iterator[Path]:
    """Yield a private temporary directory; publish it by rename when the block completes.

    The caller must write the manifest via :func:`publish_manifest` before leaving the block.
    On error the temporary directory is removed; a killed process leaves only a ``.tmp-`` sibling
    that no reader looks at (and that the next run of the same stage clears).
    """
    final = stage_dir(root, stage, fp)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{fp}.tmp-*"):
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
        if final.exists():  # another run published the same fingerprint first: identical content
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
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
