"""Install Faultline into a virtual environment from the cache (online) or from a bundle (no network at all).

What lands in the venv: every pinned wheel (``--no-index --no-deps``: exactly the resolved set), Horovod built
once per machine (Gloo; NCCL too on GPU hosts), a Java runtime in ``<venv>/jre`` (Spark finds it through
``tasks.core.runtime``), the RAPIDS Accelerator jar in ``<venv>/jars`` on GPU hosts, and the project itself
(editable). On a host whose Python already has a CUDA build of torch (NVIDIA's containers), that torch is used
through a ``.pth`` file instead of installing another. A stamp makes a second run a no-op.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tasks.core import nativelibs

from .host import REPO, Target
from .wheelhouse import DOCS_ASSETS, GPU_LOCK, LOCK, say

STAMP = ".faultline-setup"


def fingerprint(target: Target, source: str) -> str:
    h = hashlib.sha256(json.dumps([target.as_dict(), source]).encode())
    for p in sorted((REPO / "deployments" / "setup").glob("*")) + [
        LOCK,
        GPU_LOCK,
        DOCS_ASSETS,
        REPO / "pyproject.toml",
    ]:
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def up_to_date(venv: Path, fp: str) -> bool:
    try:
        return json.loads((venv / STAMP).read_text()).get("fingerprint") == fp
    except (OSError, ValueError):  # no stamp, or one from an older setup
        return False


def _run(cmd: list, what: str) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_venv(python: str, venv: Path, target: Target) -> Path:
    py = venv_python(venv)
    if py.exists():
        have = _run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], "python").strip()
        if have == target.python:
            return py
        say(f"{venv} holds Python {have}, the target is {target.python}: making it again")
        shutil.rmtree(venv)
    made = subprocess.run([python, "-m", "venv", venv], capture_output=True, text=True)
    if made.returncode != 0:  # an interpreter without ensurepip: a venv without pip, pip from its wheel
        say(f"{python} -m venv failed ({made.stderr.strip()[-200:]}); making it without pip")
        shutil.rmtree(venv, ignore_errors=True)
        _run([python, "-m", "venv", "--without-pip", venv], f"{python} -m venv --without-pip {venv}")
    return py


def ensure_pip(py: Path, wheels: list[Path]) -> None:
    """pip in the venv at the pinned version, installed from its own wheel (no network, no ensurepip)."""
    pip = [w for w in wheels if w.name.startswith("pip-")]
    if pip:
        _run([py, f"{pip[0]}/pip", "install", "-q", "--no-index", "--no-deps", pip[0]], "pip bootstrap")


def link_host_torch(py: Path, torch: dict) -> None:
    """The host's CUDA torch (and the NVIDIA libraries beside it) visible after the venv's own packages."""
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "site").strip()
    Path(site, "_faultline_host_torch.pth").write_text(torch["site"] + "\n")
    say(f"using the host's torch {torch['version']} (CUDA {torch['cuda']}) from {torch['site']}")


def install_wheels(py: Path, wheels: list[Path]) -> None:
    say(f"installing {len(wheels)} wheels (no index, no resolver: the pinned set as resolved)")
    ensure_pip(py, wheels)
    # --ignore-installed: a package the host's site also has (same version) still lands in the venv, with its
    # .pth hooks (numba-cuda's redirector, seen missing on the H200 when pip took the host's copy as installed)
    flags = ["--no-index", "--no-deps", "--no-compile", "--ignore-installed"]
    if any(w.name.startswith("xgboost_cu13-") for w in wheels):  # a venv set up for the CPU before: one xgboost
        subprocess.run([py, "-m", "pip", "uninstall", "-q", "-y", "xgboost-cpu"], capture_output=True)
    _run([py, "-m", "pip", "install", "-q", *flags, *wheels], "pip install")


def install_horovod(py: Path, sdist: Path, gpu: bool) -> str:
    script = REPO / "deployments" / "setup" / "build_horovod.sh"
    say(f"Horovod ({'Gloo + NCCL' if gpu else 'Gloo'}): the cached wheel, or building it once for this machine")
    wheel = _run(["bash", script, py, sdist, "nccl" if gpu else "cpu"], "Horovod build").strip().splitlines()[-1]
    _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall", wheel], "Horovod")
    return wheel


def compile_site(py: Path) -> None:
    """Byte-code for every installed module, written once here: the wheels go in with ``--no-compile`` (fast), and
    a host that sets ``PYTHONDONTWRITEBYTECODE`` would otherwise compile Prefect, MLflow, GX and torch from source
    in every process that imports them (about twice the import time: 1.9 s against 0.7 s for GX). A file that
    does not compile (a package's template or test data) is left as it is."""
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "site").strip()
    started = time.time()
    subprocess.run([py, "-m", "compileall", "-q", "-j", "0", site], capture_output=True)
    say(f"byte-compiled {site} in {time.time() - started:.0f} s")


def warm_kernels(venv: Path) -> str:
    """``faultline warmup``: the GPU path's kernels compiled into CuPy's cache now, not in the first run's stages. A
    failure (no GPU visible while installing, say) is reported and leaves the install as it is."""
    proc = subprocess.run([venv / "bin" / "faultline", "warmup"], capture_output=True, text=True)
    lines = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()
    say(f"kernel warm-up: {lines[-1][-300:]}" + ("" if proc.returncode == 0 else f" (exit {proc.returncode})"))
    return lines[-1][-300:]


def install_jre(venv: Path, tarball: Path) -> Path:
    target = venv / "jre"
    shutil.rmtree(target, ignore_errors=True)
    with tarfile.open(tarball) as t:
        t.extractall(venv, filter="tar")
    return target


def install_jar(venv: Path, jar: Path | None) -> Path | None:
    if jar is None:
        return None
    (venv / "jars").mkdir(exist_ok=True)
    installed = venv / "jars" / jar.name
    shutil.copy2(jar, installed)
    started = time.time()
    if nativelibs.unpack(installed) is not None:  # once here, not at every Spark start
        took = time.time() - started
        say(f"unpacked the jar's native libraries into {nativelibs.native_dir(installed)} in {took:.1f} s")
    return installed


DOCS_DIR = "share/faultline-datadocs"  # tasks.core.datadocs looks here (under sys.prefix)


def install_docs_assets(venv: Path, tarballs: list[Path]) -> Path:
    """Each npm tarball unpacked (its ``package/`` folder) into ``<venv>/share/faultline-datadocs/<pkg>@<ver>``."""
    spec = json.loads(DOCS_ASSETS.read_text())
    by_file = {meta["tarball"].rsplit("/", 1)[1]: pkg for pkg, meta in spec["packages"].items()}
    root = venv / DOCS_DIR
    shutil.rmtree(root, ignore_errors=True)
    for tgz in tarballs:
        dest = root / by_file[tgz.name]
        with tarfile.open(tgz) as t:
            members = [m for m in t.getmembers() if m.name.startswith("package/") and (m.isfile() or m.isdir())]
            for m in members:
                m.name = m.name[len("package/") :]
            t.extractall(dest, members=[m for m in members if m.name], filter="data")
    missing = sorted(set(by_file) - {t.name for t in tarballs})
    if missing:
        raise SystemExit(f"Data Docs assets missing from the install's parts: {missing}")
    return root


def install(python: str, venv: Path, target: Target, torch: dict | None, parts: dict, fp: str) -> dict:
    started = time.time()
    py = make_venv(python, venv, target)
    if target.torch == "host":
        if not torch:
            raise SystemExit(f"target {target.name} uses the host's CUDA torch, but {python} cannot import one")
        link_host_torch(py, torch)
    install_wheels(py, parts["wheels"])
    hvd = install_horovod(py, parts["horovod"], target.gpu)
    compile_site(py)
    jre = install_jre(venv, parts["jre"])
    jar = install_jar(venv, parts["jar"])
    install_docs_assets(venv, parts["npm"])
    _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation", "-e", REPO], "project")
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True).stdout.strip()
    warmed = warm_kernels(venv) if target.gpu else None
    record = {
        "fingerprint": fp,
        "target": target.as_dict(),
        "host_torch": torch,
        "horovod_wheel": hvd,
        "java_home": str(jre),
        "rapids_jar": str(jar) if jar else None,
        "seconds": round(time.time() - started, 1),
        "pip_check": check,
        "kernel_warmup": warmed,
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (venv / STAMP).write_text(json.dumps(record, indent=1))
    say(
        f"ready in {record['seconds']:.0f} s: {venv} ({target.name}; Java in {jre}{'; jar ' + str(jar) if jar else ''})"
    )
    return record


def parts_from_bundle(bundle: Path) -> dict:
    def one(pattern: str) -> Path | None:
        found = sorted(bundle.glob(pattern))
        return found[-1] if found else None

    return {
        "wheels": sorted((bundle / "wheels").glob("*.whl")),
        "horovod": one("sources/horovod-*.tar.gz"),
        "jre": one("jre/jre-*.tar.gz"),
        "jar": one("jars/*.jar"),
        "npm": sorted((bundle / "npm").glob("*.tgz")),
    }


def python_for(target: Target) -> str:
    return shutil.which(f"python{target.python}") or sys.executable
