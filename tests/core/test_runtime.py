import pytest

from tasks.core.config import load_config
from tasks.core.errors import ConfigError
from tasks.core.runtime import GPU, Hardware, RapidsJarMissing, detect_hardware, executor_memory_gb, spark_conf

H200 = Hardware(cpu_count=16, memory_gb=128, gpus=(GPU(0, "NVIDIA H200", 139.8),), source="test")
CPU = Hardware(cpu_count=2, memory_gb=24, source="test")


def test_detect_hardware_works_without_a_gpu():
    hw = detect_hardware()
    assert hw.cpu_count >= 1 and hw.memory_gb > 0
    assert hw.gpu_count == len(hw.gpus)
    assert hw.cpu_cores is None or 1 <= hw.cpu_cores <= hw.cpu_count  # physical cores: at most the threads
    assert hw.as_dict()["cpu_cores"] == hw.cpu_cores  # so every benchmark's JSON records them


def test_executor_memory_follows_the_guides_rule():
    cfg = load_config("dgx").ingest
    assert executor_memory_gb(cfg, H200) == pytest.approx(139.8 * 1.2 + 2, abs=0.05)
    assert spark_conf(cfg, H200, None)["spark.executor.memory"] == f"{round(executor_memory_gb(cfg, H200) * 1024)}m"
    assert executor_memory_gb(load_config("local", ["ingest.executor_memory_gb=3"]).ingest, H200) == 3


def test_spark_conf_essentials(tmp_path):
    conf = spark_conf(load_config("local").ingest, CPU, tmp_path / "events")
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert "-XX:MaxDirectMemorySize=2048m" in conf["spark.executor.extraJavaOptions"]
    # the collector ingest.jvm_gc names (Java's default, G1, unless set), on the driver and the executors
    parallel = load_config("local", ["ingest.jvm_gc=Parallel"]).ingest
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert conf[key].split()[-1] == "-XX:+UseG1GC"
        assert spark_conf(parallel, CPU, None)[key].split()[-1] == "-XX:+UseParallelGC"
    assert conf["spark.hadoop.parquet.block.size"] == str(256 * 1024 * 1024)
    assert conf["spark.eventLog.enabled"] == "true" and (tmp_path / "events").is_dir()
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.plugins" not in conf


def test_rapids_jar_configured_but_missing_is_a_clear_error(tmp_path):
    cfg = load_config("dgx", [f"ingest.rapids_jar={tmp_path / 'rapids-4-spark.jar'}"]).ingest
    with pytest.raises(RapidsJarMissing, match="rapids-4-spark.jar.*no such file"):
        spark_conf(cfg, H200, None)


def test_rapids_conf_when_the_jar_exists(tmp_path):
    import pyspark

    jar = tmp_path / "rapids-4-spark_2.13.jar"
    jar.write_bytes(b"PK")
    conf = spark_conf(load_config("dgx", [f"ingest.rapids_jar={jar}"]).ingest, H200, None)
    assert conf["spark.plugins"] == "com.nvidia.spark.SQLPlugin"
    assert conf["spark.rapids.sql.concurrentGpuTasks"] == "2"
    short = "".join(pyspark.__version__.split(".")[:3])
    assert conf["spark.shuffle.manager"] == f"com.nvidia.spark.rapids.spark{short}.RapidsShuffleManager"
    assert conf["spark.rapids.shuffle.mode"] == "MULTITHREADED"  # UCX only when asked: it needs native libraries
    assert conf["spark.rapids.sql.explain"] == "ALL" and conf["spark.rapids.sql.mode"] == "executeOnGPU"
    assert conf["spark.sql.cache.serializer"] == "com.nvidia.spark.ParquetCachedBatchSerializer"
    assert "spark.executor.resource.gpu.amount" not in conf  # local[*]: one process on GPU 0, nothing to schedule
    cluster = spark_conf(
        load_config("dgx", [f"ingest.rapids_jar={jar}", "ingest.master=spark://10.0.0.1:7077"]).ingest, H200, None
    )
    assert cluster["spark.executor.resource.gpu.amount"] == "1" and cluster["spark.task.resource.gpu.amount"] == "0.5"
    explain = spark_conf(
        load_config("dgx", [f"ingest.rapids_jar={jar}", "ingest.rapids_mode=explainOnly"]).ingest, H200, None
    )
    assert explain["spark.rapids.sql.mode"] == "explainOnly" and "spark.rapids.memory.pinnedPool.size" not in explain
    assert conf["spark.rapids.memory.pinnedPool.size"] == "8g"
    none = spark_conf(
        load_config("dgx", [f"ingest.rapids_jar={jar}", "ingest.rapids_pinned_pool=0"]).ingest, H200, None
    )
    assert none["spark.rapids.memory.pinnedPool.size"] == "0"  # no pool: the copies go through pageable memory
    with pytest.raises(ConfigError, match="rapids_pinned_pool"):
        load_config("dgx", ["ingest.rapids_pinned_pool=eight"])


def test_installed_rapids_jar_is_the_venvs(tmp_path, monkeypatch):
    from tasks.core import runtime

    monkeypatch.setattr(runtime.sys, "prefix", str(tmp_path))
    cfg = load_config("dgx", ["ingest.rapids_jar=installed"]).ingest
    with pytest.raises(RapidsJarMissing, match="make setup"):
        spark_conf(cfg, H200, None)
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "rapids-4-spark_2.13-26.08.1-cuda13.jar").write_bytes(b"PK")
    assert spark_conf(cfg, H200, None)["spark.jars"] == str(
        tmp_path / "jars" / "rapids-4-spark_2.13-26.08.1-cuda13.jar"
    )


def test_input_splits_are_at_least_four_a_core_of_a_local_master(tmp_path):
    """14 files of 73 MB made 5 splits on 2 cores (one core idle through the last); 16 cores could get 28 of
    unequal size. A cluster's master says nothing about its cores here: Spark's own default stays."""
    local = load_config("local").ingest
    assert spark_conf(local, CPU, None)["spark.sql.files.minPartitionNum"] == "8"
    assert spark_conf(local, H200, None)["spark.sql.files.minPartitionNum"] == "64"
    three = load_config("local", ["ingest.master=local[3]"]).ingest
    assert spark_conf(three, H200, None)["spark.sql.files.minPartitionNum"] == "12"
    cluster = load_config("local", ["ingest.master=spark://127.0.0.1:7077"]).ingest
    assert "spark.sql.files.minPartitionNum" not in spark_conf(cluster, H200, None)
    jar = tmp_path / "rapids-4-spark_2.13-26.08.1-cuda13.jar"
    jar.write_bytes(b"")
    rapids = load_config("local", [f"ingest.rapids_jar={jar}"]).ingest
    assert "spark.sql.files.minPartitionNum" not in spark_conf(rapids, H200, None)


GC_SCRIPT = """
import json, sys
from tasks.core.config import load_config
from tasks.core.runtime import detect_hardware, spark_conf, spark_session
sets = ["ingest.master=local[1]", "ingest.driver_memory_gb=1", "ingest.event_log=false", *sys.argv[1:]]
cfg = load_config("local", sets)
spark = spark_session(spark_conf(cfg.ingest, detect_hardware(), None))
beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print(json.dumps(sorted(b.getName() for b in beans)))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.parametrize(("sets", "prefix"), [([], "G1 "), (["ingest.jvm_gc=Parallel"], "PS ")])  # G1's, ParallelGC's
def test_the_configured_collector_is_the_one_the_spark_jvm_runs(sets, prefix):
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", GC_SCRIPT, *sets], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    names = json.loads(p.stdout.strip().splitlines()[-1])
    assert names and all(n.startswith(prefix) for n in names), names


def test_a_jvm_that_dies_while_starting_is_started_once_more(monkeypatch, capsys):
    from pyspark import SparkContext

    from tasks.core.runtime import get_or_create

    class Builder:
        def __init__(self, failures: int):
            self.failures, self.calls = failures, 0

        def getOrCreate(self):
            self.calls += 1
            if self.calls <= self.failures:
                SparkContext._gateway = "a dead gateway"
                raise ConnectionRefusedError(111, "Connection refused")
            return "session"

    for name in ("_gateway", "_jvm", "_active_spark_context"):  # a worker's own Spark session gets them back
        monkeypatch.setattr(SparkContext, name, None)
    once = Builder(1)
    assert get_or_create(once) == "session" and once.calls == 2 and SparkContext._gateway is None
    assert "Spark's JVM died while starting" in capsys.readouterr().err
    twice = Builder(2)
    with pytest.raises(RuntimeError, match="died while starting, 2 times"):
        get_or_create(twice)
    assert twice.calls == 2


def test_the_gpu_profiles_use_the_installed_plugin_where_a_gpu_is_visible(tmp_path, monkeypatch):
    """``auto``: the jar make setup installed, on a host with a GPU, and then the line parse the plugin keeps every
    line with; CPU Spark and its own CSV parser on a host without a GPU or without the jar."""
    from tasks.core import runtime
    from tasks.core.schema import KPI_PARSE_CONF

    monkeypatch.setattr(runtime.sys, "prefix", str(tmp_path))
    for profile in ("gpu", "dgx"):
        cfg = load_config(profile).ingest
        assert (cfg.rapids_jar, cfg.kpi_parse) == ("auto", "auto")
        for hw in (CPU, H200):  # no jar installed yet
            conf = spark_conf(cfg, hw, None)
            assert "spark.plugins" not in conf and conf[KPI_PARSE_CONF] == "csv"
        (tmp_path / "jars").mkdir(exist_ok=True)
        jar = tmp_path / "jars" / "rapids-4-spark_2.13-26.08.1-cuda13.jar"
        jar.write_bytes(b"PK")
        conf = spark_conf(cfg, H200, None)
        assert conf["spark.jars"] == str(jar) and conf[KPI_PARSE_CONF] == "lines"
        assert conf["spark.rapids.sql.format.csv.read.enabled"] == "true"
        assert "spark.plugins" not in spark_conf(cfg, CPU, None)  # a jar but no GPU
        jar.unlink()
