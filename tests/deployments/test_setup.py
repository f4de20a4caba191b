"""Setup on every kind of host: the target a machine needs, the bundle's integrity, and an install from a
bundle with no network at all (a network namespace with only loopback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.setup import host, wheelhouse
from tests.helpers import REPO


def test_a_gpu_host_with_a_cuda_torch_uses_it(monkeypatch):
    monkeypatch.setenv("FAULTLINE_GPU", "1")
    monkeypatch.setattr(host, "host_torch", lambda py: {"version": "2.11.0", "cuda": "13.0", "site": "/opt/t"})
    target, torch = host.detect(sys.executable)
    assert target.gpu and target.torch == "host" and target.name.startswith("cu13-py3") and torch["site"] == "/opt/t"
    reqs = wheelhouse.requirements(target)
    assert not any(r.startswith("torch") for r in reqs)  # the host's torch, not another
    assert "cudf-cu13==26.10.2" in reqs and "pyspark==4.2.0" in reqs
    assert "xgboost-cu13==3.2.0" in reqs and not any(r.startswith("xgboost-cpu") for r in reqs)  # one xgboost
    monkeypatch.setenv("FAULTLINE_GPU", "0")
    cpu, _ = host.detect(sys.executable)
    assert not cpu.gpu and cpu.torch == "lock" and "torch==2.13.0" in wheelhouse.requirements(cpu)
    assert "xgboost-cpu==3.2.0" in wheelhouse.requirements(
        cpu
    ) and "xgboost-cu13==3.2.0" not in wheelhouse.requirements(cpu)


def test_profile_gpu_asks_for_the_gpu_stack(monkeypatch):
    monkeypatch.delenv("FAULTLINE_GPU", raising=False)
    monkeypatch.setenv("PROFILE", "gpu")
    assert host.has_gpu()


def test_the_host_provides_torch_and_its_cuda_libraries_not_the_bundle():
    provided = ["torch-2.11.0-cp312.whl", "nvidia_cublas-13.1.1.3-py3.whl", "nvidia_nccl_cu13-2.29.7-py3.whl"]
    carried = ["cupy_cuda13x-14.2.0-cp312.whl", "nvidia_nvvm-13.0.88-py3.whl", "nvidia_ml_py-13.615.71-py3.whl"]
    assert all(wheelhouse.HOST_PROVIDED.match(n) for n in provided)
    assert not any(wheelhouse.HOST_PROVIDED.match(n) for n in carried)


def test_a_damaged_bundle_is_named(tmp_path):
    (tmp_path / "wheels").mkdir()
    whl = tmp_path / "wheels" / "x-1.0-py3-none-any.whl"
    whl.write_bytes(b"PK-original")
    files = {"wheels/x-1.0-py3-none-any.whl": {"sha256": wheelhouse.sha256(whl), "bytes": whl.stat().st_size}}
    (tmp_path / "bundle.json").write_text(json.dumps({"target": {}, "files": files}))
    assert wheelhouse.verify_bundle(tmp_path)["files"] == files
    whl.write_bytes(b"PK-truncated")
    with pytest.raises(SystemExit, match="x-1.0-py3-none-any.whl is missing or damaged"):
        wheelhouse.verify_bundle(tmp_path)


def _offline(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """``cmd`` in a new network namespace whose only interface is loopback (no route anywhere else)."""
    script = "ip link set lo up && exec " + " ".join(f"'{c}'" for c in cmd)
    return subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, **kw)


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux) for a network namespace")
def test_make_setup_from_a_bundle_with_no_network(tmp_path):
    bundle, venv = tmp_path / "bundle", tmp_path / "venv"
    made = subprocess.run(["make", "bundle", f"BUNDLE={bundle}", "NOJAR=1"], cwd=REPO, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["target"]["name"].startswith("cpu-py3") and manifest["total_bytes"] > 1e9
    assert any(f.startswith("jre/jre-") for f in manifest["files"]) and any("horovod" in f for f in manifest["files"])
    probe = _offline([sys.executable, "-c", "import socket; socket.create_connection(('pypi.org', 443), 5)"])
    assert probe.returncode != 0, "the namespace reaches the network"
    started = time.time()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    python = shutil.which("python3.11") or "python3"
    setup = ["make", "-C", str(REPO), "setup", f"BUNDLE={bundle}", f"VENV={venv}", f"PYTHON={python}"]
    installed = _offline(setup, env=env, timeout=1800)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    seconds = time.time() - started
    stamp = json.loads((venv / ".faultline-setup").read_text())
    assert stamp["java_home"] == str(venv / "jre") and Path(stamp["horovod_wheel"]).is_file()
    assert sum(f.startswith("npm/") for f in manifest["files"]) == 10  # the Data Docs' scripts and styles
    assert (venv / "share/faultline-datadocs/jquery@3.7.1/dist/jquery.min.js").is_file()
    # byte-code written by setup, so a host with PYTHONDONTWRITEBYTECODE does not compile the stack in every process
    site = next(venv.glob("lib/python3*/site-packages"))
    assert list((site / "great_expectations" / "__pycache__").glob("__init__.*.pyc"))
    assert list((site / "prefect" / "__pycache__").glob("flows.*.pyc"))
    # a script file, not `python -c`: PySpark's connect module takes a main module without a file for its doctests
    probe_py = tmp_path / "probe.py"
    probe_py.write_text(
        "import pyspark, torch, horovod.torch, prefect, great_expectations, tasks.core.runtime as r\n"
        "print(r.java_home())\n"
    )
    clean = {k: v for k, v in env.items() if k != "JAVA_HOME"}  # this test process's Spark set it to its own venv's
    check = _offline([str(venv / "bin" / "python"), str(probe_py)], env=clean)
    assert check.returncode == 0 and check.stdout.strip() == str(venv / "jre"), check.stderr[-2000:]
    again = _offline(["make", "-C", str(REPO), "setup", f"BUNDLE={bundle}", f"VENV={venv}"], env=env, timeout=300)
    assert again.returncode == 0 and "up to date" in again.stderr  # idempotent
    print(f"offline install from the bundle: {seconds:.0f} s, {manifest['total_bytes'] / 1e9:.2f} GB")
