"""The RAPIDS Accelerator's native libraries, unpacked once beside its jar instead of at every JVM start.

The jar carries libcudf (798 MB in 26.08.1) and a few smaller JNI libraries under ``<os.arch>/<os.name>/``. cuDF's
``NativeDepsLoader`` copies each one out to a temporary file whenever a JVM first touches cuDF, then loads it:
every Spark application with the plugin pays for writing about 830 MB before its first GPU query. Since cuDF
26.06 the loader takes a folder of libraries unpacked already (``-Dai.rapids.cudf.lib-native-dir``: it checks up
front that each library it is asked for is there, and loads them in place). ``make setup`` unpacks them
(:func:`unpack`) into ``<jar>.native/``; :func:`ready` hands that folder to the JVM only where it matches the jar
entry for entry, so a jar replaced in place falls back to the loader's own copying.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import tempfile
import zipfile
from pathlib import Path

STAMP = "faultline-native.json"
NATIVE_DIR_OPTION = "-Dai.rapids.cudf.lib-native-dir"
LOAD_TIMING_OPTION = "-Dai.rapids.cudf.lib-log-load-timing=true"  # the loader's own per-library times, at INFO


def java_arch(machine: str | None = None) -> str:
    """``os.arch`` as the JVM names it, which the jar's library folder is named after."""
    m = (machine or platform.machine()).lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "aarch64", "arm64": "aarch64"}.get(m, m)


def native_dir(jar: Path) -> Path:
    return jar.with_name(jar.stem + ".native")


def _entries(jar: Path, arch: str) -> dict[str, zipfile.ZipInfo]:
    """The jar's native libraries for this platform, by file name (read from the jar's directory only)."""
    prefix = f"{arch}/Linux/"
    with zipfile.ZipFile(jar) as z:
        return {
            i.filename[len(prefix) :]: i
            for i in z.infolist()
            if i.filename.startswith(prefix) and i.filename.endswith(".so") and "/" not in i.filename[len(prefix) :]
        }


def _manifest(jar: Path, entries: dict[str, zipfile.ZipInfo]) -> dict:
    st = jar.stat()
    return {
        "jar": jar.name,
        "jar_bytes": st.st_size,
        "libraries": {name: {"bytes": i.file_size, "crc32": i.CRC} for name, i in sorted(entries.items())},
    }


def ready(jar: Path, arch: str | None = None) -> Path | None:
    """The unpacked folder for ``jar`` where it holds every library the jar does, at the jar's sizes; else None."""
    folder = native_dir(jar)
    try:
        stamp = json.loads((folder / STAMP).read_text())
        entries = _entries(jar, arch or java_arch())
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    if not entries or stamp != _manifest(jar, entries):
        return None
    for name, info in entries.items():
        try:
            if (folder / name).stat().st_size != info.file_size:
                return None
        except OSError:
            return None
    return folder


def unpack(jar: Path, arch: str | None = None) -> Path | None:
    """Unpack the jar's native libraries for this platform into ``<jar>.native/`` (all or nothing: unpacked into
    a temporary sibling, then renamed). Idempotent. None where the jar carries none for this platform."""
    arch = arch or java_arch()
    if (done := ready(jar, arch)) is not None:
        return done
    entries = _entries(jar, arch)
    if not entries:
        return None
    folder = native_dir(jar)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        tmp.chmod(0o755)
        with zipfile.ZipFile(jar) as z:
            for name, info in entries.items():
                with z.open(info) as src, open(tmp / name, "wb") as dst:  # the CRC is checked as it is read
                    shutil.copyfileobj(src, dst, 16 * 2**20)
                os.chmod(tmp / name, 0o755)
        (tmp / STAMP).write_text(json.dumps(_manifest(jar, entries), indent=1))
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def java_options(jar: Path) -> str:
    """The JVM options that load the jar's libraries from its unpacked folder ('' where there is none, or where
    its path has white space, which Spark's option string cannot carry)."""
    try:
        st = jar.stat()
    except OSError:
        return ""
    try:
        stamped = (native_dir(jar) / STAMP).stat().st_mtime_ns
    except OSError:
        return ""
    return _java_options(str(jar.resolve()), st.st_size, st.st_mtime_ns, stamped)


@functools.lru_cache(maxsize=8)
def _java_options(jar: str, size: int, mtime_ns: int, stamped: int) -> str:  # the jar's directory read once
    folder = ready(Path(jar))
    if folder is None or any(c.isspace() for c in str(folder)):
        return ""
    return f"{NATIVE_DIR_OPTION}={folder} {LOAD_TIMING_OPTION}"
