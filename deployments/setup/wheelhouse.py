"""Everything setup installs, fetched once per machine into a cache: wheels for a target, Horovod's patched
sdist, a Java runtime made with jlink, the RAPIDS Accelerator jar, and the npm packages GX's Data Docs load from
CDNs (``tasks/core/datadocs_assets.json``). A bundle is the same set in one
directory with a manifest of versions and SHA-256 hashes, for air-gapped installs.

Standard library only (runs before any virtual environment exists).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from .host import CACHE, REPO, Target

LOCK = REPO / "requirements.lock"
GPU_LOCK = REPO / "deployments" / "setup" / "requirements-gpu.lock"
# Packages published only as source on PyPI: built once into pure-Python wheels (valid for any Python 3).
SDIST_ONLY = ("pyspark",)
# What a CUDA build of torch brings with it: on "host" targets these come from the host, not the bundle.
HOST_PROVIDED = re.compile(
    r"^(torch|triton|nvidia[-_](cublas|cuda[-_]cupti|cuda[-_]nvrtc|cuda[-_]runtime|cudnn[-_]cu13|cufft|cufile|curand"
    r"|cusolver|cusparse|cusparselt[-_]cu13|nccl[-_]cu13|nvjitlink|nvshmem[-_]cu13|nvtx))-"
)
DOCS_ASSETS = REPO / "tasks" / "core" / "datadocs_assets.json"
HOROVOD = "0.28.1"
RAPIDS = ("com/nvidia/rapids-4-spark_2.13", "26.08.1", "cuda13")
JDK_MODULES = (
    "java.se,jdk.unsupported,jdk.incubator.vector,jdk.management,jdk.management.agent,jdk.crypto.ec,jdk.zipfs,"
    "jdk.security.auth,jdk.naming.dns,jdk.net,jdk.localedata,jdk.jcmd,jdk.jfr,jdk.attach"
)


def say(msg: str) -> None:
    print(f"[faultline setup] {msg}", file=sys.stderr, flush=True)


# Common-lock packages a GPU target takes in another build from the gpu lock (both install the same module).
GPU_REPLACES = {"xgboost-cpu": "xgboost-cu13"}


def requirements(target: Target) -> list[str]:
    lines = [ln.split("#")[0].strip() for ln in LOCK.read_text().splitlines()]
    if target.gpu:
        lines = [ln for ln in lines if re.split(r"[=<>\[ ]", ln)[0] not in GPU_REPLACES]
        lines += [ln.split("#")[0].strip() for ln in GPU_LOCK.read_text().splitlines()]
    reqs = [ln for ln in lines if ln]
    return [r for r in reqs if not (target.torch == "host" and re.match(r"torch\b", r))]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


PIP = "pip==25.3"  # the resolver every resolution runs with (older pips trip over pinned extras)


def _pip_command() -> list[str]:
    """pip, pinned: run from its own wheel in the wheelhouse (fetched once by whatever pip this Python has)."""
    wheels = CACHE / "wheelhouse"
    version = PIP.split("==")[1]
    wheel = wheels / f"pip-{version}-py3-none-any.whl"
    if not wheel.is_file():
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", PIP, "-d", str(wheels)], check=True)
    return [sys.executable, str(wheel / "pip")]


def _pip(*args: str) -> str:
    proc = subprocess.run([*_pip_command(), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"pip {' '.join(args[:3])} ... failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _platform_args(target: Target) -> list[str]:
    """pip's tags for the target; none when this interpreter is the target's (its own tags are exact)."""
    if target.python == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return ["--only-binary=:all:"]
    v = target.python.replace(".", "")
    out = ["--only-binary=:all:", "--python-version", target.python, "--implementation", "cp"]
    out += ["--abi", f"cp{v}", "--abi", "abi3", "--abi", "none"]
    for n in range(5, 40):
        out += ["--platform", f"manylinux_2_{n}_x86_64"]
    return out + ["--platform", "manylinux2014_x86_64", "--platform", "manylinux2010_x86_64", "--platform", "any"]


def _sdist_wheels(reqs: list[str], dest: Path) -> None:
    """Pure-Python wheels of the packages PyPI ships only as source (built once, here)."""
    for req in reqs:
        name = re.split(r"[=<>\[ ]", req)[0]
        if name not in SDIST_ONLY or list(dest.glob(f"{name}-{req.split('==')[-1]}-*.whl")):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            say(f"building a wheel of {req} (published as source only; once)")
            _pip("download", "-q", "--no-deps", "--no-binary", ":all:", req, "-d", tmp)
            (sdist,) = Path(tmp).glob(f"{name}-*")
            _pip("wheel", "-q", "--no-deps", "-w", str(dest), str(sdist))


def resolve(target: Target, dest: Path) -> list[str]:
    """Download the target's full resolved set into ``dest`` (files already there are kept); its file names.
    The resolution is remembered per target and requirement set, so a later run needs no network at all."""
    dest.mkdir(parents=True, exist_ok=True)
    reqs = requirements(target)
    key = hashlib.sha256(json.dumps([target.as_dict(), reqs, "report-v1"]).encode()).hexdigest()[:16]
    memo = dest / f".resolved-{target.name}-{key}.json"
    if memo.is_file() and all((dest / n).is_file() for n in json.loads(memo.read_text())):
        return json.loads(memo.read_text())
    files = _download(target, reqs, dest)
    memo.write_text(json.dumps(files))
    return files


def _download(target: Target, reqs: list[str], dest: Path) -> list[str]:
    _sdist_wheels(reqs, dest)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(reqs) + "\n")
    say(f"resolving {len(reqs)} pinned requirements for {target.name} (downloads only what {dest} lacks)")
    _pip("download", "-q", *_platform_args(target), "--find-links", str(dest), "-d", str(dest), "-r", f.name)
    files = _resolved(target, f.name, dest)
    return sorted(n for n in files if not (target.torch == "host" and HOST_PROVIDED.match(n)))


def _resolved(target: Target, requirements_txt: str, dest: Path) -> list[str]:
    """The exact set pip installs for the target, resolved offline against ``dest`` (pip's install report)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            "install", "-q", "--dry-run", "--ignore-installed", "--no-index", "--find-links", str(dest),
            *_platform_args(target), "--target", f"{tmp}/t", "--report", str(report), "-r", requirements_txt,
        )  # fmt: skip
        items = json.loads(report.read_text())["install"]
    return [Path(urllib.request.url2pathname(i["download_info"]["url"].removeprefix("file://"))).name for i in items]


def horovod_sdist(dest: Path) -> Path:
    """Horovod's sdist with the fixes it needs on PyTorch >= 2.1 and GCC 13: C++17 and ``#include <string>``."""
    out = dest / f"horovod-{HOROVOD}-patched-2.tar.gz"  # -2: the loopback bind
    if out.is_file():
        return out
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _pip("download", "-q", "--no-deps", "--no-binary", ":all:", f"horovod=={HOROVOD}", "-d", tmp)
        with tarfile.open(Path(tmp) / f"horovod-{HOROVOD}.tar.gz") as t:
            t.extractall(tmp, filter="data")
        src = Path(tmp) / f"horovod-{HOROVOD}"
        for cml in (src / "CMakeLists.txt", src / "horovod" / "torch" / "CMakeLists.txt"):
            cml.write_text(cml.read_text().replace("CMAKE_CXX_STANDARD 14", "CMAKE_CXX_STANDARD 17"))
        gt = src / "horovod" / "common" / "group_table.h"
        if "#include <string>" not in gt.read_text():
            gt.write_text("#include <string>\n#include <cstdint>\n" + gt.read_text())
        # horovodrun's rendezvous and services bind every interface (''); bind loopback unless told otherwise
        net = src / "horovod" / "runner" / "util" / "network.py"
        bind = "addr = (os.environ.get('HOROVOD_BIND_ADDRESS', '127.0.0.1'), port)"
        net.write_text("import os\n" + net.read_text().replace("addr = ('', port)", bind))
        with tarfile.open(out.with_suffix(f".{os.getpid()}.partial"), "w:gz") as t:
            t.add(src, arcname=src.name)
        out.with_suffix(f".{os.getpid()}.partial").rename(out)
    return out


def java_runtime(dest: Path) -> Path:
    """A Java runtime for Spark made with jlink from a JDK on this machine (Spark 4 needs Java 17+ and the
    jdk.incubator.vector module, which prebuilt slim runtimes lack). Cached as a tarball."""
    cached = sorted(dest.glob("jre-*.tar.gz"))
    if cached:
        return cached[-1]
    dest.mkdir(parents=True, exist_ok=True)
    jlink = _find_jlink()
    version = subprocess.run([str(jlink.with_name("java")), "-version"], capture_output=True, text=True).stderr
    major = re.search(r'version "(\d+)', version).group(1)
    out = dest / f"jre-{major}.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        say(f"making a Java {major} runtime with {jlink} (once)")
        subprocess.run(
            [str(jlink), "--add-modules", JDK_MODULES, "--strip-debug", "--no-man-pages", "--no-header-files"]
            + ["--compress=2", "--output", f"{tmp}/jre"],
            check=True,
        )
        with tarfile.open(out.with_suffix(f".{os.getpid()}.partial"), "w:gz") as t:
            t.add(f"{tmp}/jre", arcname="jre")
        out.with_suffix(f".{os.getpid()}.partial").rename(out)
    return out


def _find_jlink() -> Path:
    import os

    homes = [os.environ.get("JAVA_HOME", ""), *sorted(map(str, Path("/usr/lib/jvm").glob("*")), reverse=True)]
    javac = shutil.which("javac")
    if javac:
        homes.insert(0, str(Path(javac).resolve().parents[1]))
    for home in filter(None, homes):
        jlink = Path(home) / "bin" / "jlink"
        if jlink.is_file() and (Path(home) / "jmods" / "java.base.jmod").is_file():
            return jlink
    raise SystemExit(
        "no JDK with jmods found to make Spark's Java runtime (JAVA_HOME, javac on PATH, /usr/lib/jvm): install "
        "a JDK 17 or 21 on the machine that builds the bundle, or run `make setup BUNDLE=<dir>` from a bundle"
    )


def rapids_jar(dest: Path) -> Path:
    """The RAPIDS Accelerator for Spark (CUDA 13 build) from Maven Central, checked against its SHA-1."""
    path, version, classifier = RAPIDS
    name = f"{path.rsplit('/', 1)[1]}-{version}-{classifier}.jar"
    out = dest / name
    if out.is_file():
        return out
    dest.mkdir(parents=True, exist_ok=True)
    url = f"https://repo1.maven.org/maven2/{path}/{version}/{name}"
    say(f"downloading {url} (once)")
    want = urllib.request.urlopen(url + ".sha1", timeout=60).read().decode().split()[0]
    tmp = out.with_suffix(f".{os.getpid()}.partial")
    with urllib.request.urlopen(url, timeout=600) as r, open(tmp, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)
    got = hashlib.sha1(tmp.read_bytes()).hexdigest()
    if got != want:
        raise SystemExit(f"{url}: SHA-1 {got} does not match Maven Central's {want}")
    tmp.rename(out)
    return out


def docs_assets(dest: Path) -> list[Path]:
    """The npm tarballs of the Data Docs' scripts, styles and fonts (once), each checked against the registry's
    SHA-512 integrity pinned in ``datadocs_assets.json``."""
    spec = json.loads(DOCS_ASSETS.read_text())
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for pkg, meta in spec["packages"].items():
        path = dest / meta["tarball"].rsplit("/", 1)[1]
        algo, _, want = meta["integrity"].partition("-")
        if not path.is_file():
            url = f"{spec['registry']}/{meta['tarball']}"
            say(f"downloading {url} (once)")
            with urllib.request.urlopen(url, timeout=120) as r:
                data = r.read()
            got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
            if got != want:
                raise SystemExit(f"{url}: {algo} {got} does not match the pinned integrity {want} ({pkg})")
            tmp = path.with_suffix(f".{os.getpid()}.partial")
            tmp.write_bytes(data)
            tmp.rename(path)
        out.append(path)
    return out


def collect(target: Target, with_jar: bool) -> dict:
    """Fetch (once) everything an install for ``target`` needs into the cache; returns what and where."""
    wheels = CACHE / "wheelhouse"
    files = resolve(target, wheels)
    return {
        "target": target,
        "wheels": [wheels / n for n in files],
        "horovod": horovod_sdist(CACHE / "sources"),
        "jre": java_runtime(CACHE / "jre"),
        "jar": rapids_jar(CACHE / "jars") if (target.gpu and with_jar) else None,
        "npm": docs_assets(CACHE / "npm"),
    }


def write_bundle(parts: dict, out: Path, extra: dict) -> Path:
    """Copy (hard-link where possible) the parts into ``out`` with ``bundle.json``: versions and SHA-256."""
    for sub in ("wheels", "sources", "jre", "jars", "npm"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    placed = [(w, out / "wheels" / w.name) for w in parts["wheels"]]
    placed += [
        (parts["horovod"], out / "sources" / parts["horovod"].name),
        (parts["jre"], out / "jre" / parts["jre"].name),
    ]
    placed += [(t, out / "npm" / t.name) for t in parts["npm"]]
    if parts["jar"]:
        placed.append((parts["jar"], out / "jars" / parts["jar"].name))
    files = {}
    for src, dst in placed:
        if not dst.exists():
            try:
                dst.hardlink_to(src)
            except OSError:
                shutil.copy2(src, dst)
        files[str(dst.relative_to(out))] = {"sha256": sha256(dst), "bytes": dst.stat().st_size}
    manifest = {"target": parts["target"].as_dict(), "files": files, **extra}
    manifest["total_bytes"] = sum(f["bytes"] for f in files.values())
    (out / "bundle.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return out / "bundle.json"


def verify_bundle(bundle: Path) -> dict:
    """The bundle's manifest, after checking every file's size and SHA-256 (a broken transfer is named)."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    for rel, meta in manifest["files"].items():
        p = bundle / rel
        if not p.is_file() or p.stat().st_size != meta["bytes"] or sha256(p) != meta["sha256"]:
            raise SystemExit(f"bundle {bundle}: {rel} is missing or damaged (size/sha256 differ from bundle.json)")
    return manifest
