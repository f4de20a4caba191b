import json
import os
import zipfile

from tasks.core import nativelibs
from tasks.core.config import load_config
from tasks.core.runtime import GPU, Hardware, spark_conf

H100 = Hardware(cpu_count=16, memory_gb=128, gpus=(GPU(0, "NVIDIA H100 80GB HBM3", 79.6),), source="test")
LIBS = {"libcudf.so": b"\x7fELF cudf" * 1000, "libcudfjni.so": b"\x7fELF jni", "libnvmljni.so": b"\x7fELF nvml"}


def make_jar(path, libs=LIBS, arch="amd64"):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        z.writestr("com/nvidia/spark/SQLPlugin.class", b"\xca\xfe\xba\xbe")
        z.writestr(f"{arch}/Linux/", b"")
        for name, data in libs.items():
            z.writestr(f"{arch}/Linux/{name}", data)
        z.writestr("libjucx_amd64.so", b"top level: not one cuDF loads")
        z.writestr("aarch64/Linux/libcudf.so", b"another platform's")
    return path


def test_the_jars_libraries_for_this_platform_are_unpacked_once_beside_it(tmp_path):
    jar = make_jar(tmp_path / "rapids-4-spark_2.13-26.08.1-cuda13.jar")
    assert nativelibs.ready(jar, "amd64") is None  # nothing unpacked yet: the loader copies them out itself
    folder = nativelibs.unpack(jar, "amd64")
    assert folder == tmp_path / "rapids-4-spark_2.13-26.08.1-cuda13.native"
    assert {p.name for p in folder.glob("*.so")} == set(LIBS)
    assert all((folder / n).read_bytes() == data for n, data in LIBS.items())
    assert os.access(folder / "libcudf.so", os.X_OK) and oct(folder.stat().st_mode & 0o777) == "0o755"
    assert nativelibs.ready(jar, "amd64") == folder
    stamp = (folder / nativelibs.STAMP).stat().st_mtime_ns
    assert nativelibs.unpack(jar, "amd64") == folder and (folder / nativelibs.STAMP).stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir() if p.name != jar.name] == [folder.name]  # no temporary left


def test_a_folder_that_does_not_match_its_jar_is_not_used_and_is_unpacked_again(tmp_path):
    jar = make_jar(tmp_path / "r.jar")
    folder = nativelibs.unpack(jar, "amd64")
    (folder / "libcudf.so").write_bytes(b"cut short")  # a library of another size
    assert nativelibs.ready(jar, "amd64") is None
    (folder / "libcudf.so").unlink()
    assert nativelibs.ready(jar, "amd64") is None
    assert nativelibs.unpack(jar, "amd64") == folder and nativelibs.ready(jar, "amd64") == folder
    make_jar(jar, {**LIBS, "libcudf.so": b"\x7fELF a newer cudf"})  # the jar replaced in place
    assert nativelibs.ready(jar, "amd64") is None
    assert nativelibs.unpack(jar, "amd64") == folder
    assert (folder / "libcudf.so").read_bytes() == b"\x7fELF a newer cudf"
    assert json.loads((folder / nativelibs.STAMP).read_text())["libraries"]["libcudf.so"]["bytes"] == 17


def test_a_jar_without_libraries_for_this_platform_unpacks_nothing(tmp_path):
    jar = make_jar(tmp_path / "r.jar", arch="ppc64le")
    assert nativelibs.unpack(jar, "amd64") is None and not nativelibs.native_dir(jar).exists()
    assert nativelibs.java_arch("x86_64") == "amd64" and nativelibs.java_arch("arm64") == "aarch64"


def test_the_driver_loads_the_plugins_libraries_from_the_unpacked_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(nativelibs, "java_arch", lambda machine=None: "amd64")
    jar = make_jar(tmp_path / "rapids-4-spark_2.13-26.08.1-cuda13.jar")
    cfg = load_config("gpu", [f"ingest.rapids_jar={jar}"]).ingest
    before = spark_conf(cfg, H100, None)["spark.driver.extraJavaOptions"]
    assert "lib-native-dir" not in before  # not unpacked: cuDF's own copying, as without this
    folder = nativelibs.unpack(jar)
    conf = spark_conf(cfg, H100, None)
    assert conf["spark.driver.extraJavaOptions"].split() == [
        *before.split(),
        f"-Dai.rapids.cudf.lib-native-dir={folder}",
        "-Dai.rapids.cudf.lib-log-load-timing=true",
    ]
    assert "lib-native-dir" not in conf["spark.executor.extraJavaOptions"]  # a cluster's executors: their own
    spaced = tmp_path / "a b"
    spaced.mkdir()
    jar2 = make_jar(spaced / "r.jar")
    nativelibs.unpack(jar2)
    assert nativelibs.java_options(jar2) == ""  # Spark splits the option string at white space
