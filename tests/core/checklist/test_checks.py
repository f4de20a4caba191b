"""Every checklist check on literal evidence: passing, failing with its remedy, not applicable with why."""

from __future__ import annotations

import copy

import pytest

from tasks.core.checklist.checks import CHECKS
from tasks.core.checklist.doctor import DOCTOR_CHECKS
from tasks.core.checklist.report import FAIL, NA, PASS, WARN, evaluate, public, to_markdown
from tasks.core.config import load_config

CONFIG = load_config("local").as_dict()
SPARK = {
    "spark.master": "local[2]",
    "spark.dynamicAllocation.enabled": "false",
    "spark.executor.memory": "4096m",
    "spark.executor.extraJavaOptions": "-XX:MaxDirectMemorySize=2048m",
    "spark.driver.extraJavaOptions": "-XX:MaxDirectMemorySize=2048m",
}
SCALING = {
    "device": "2-core CPU",
    "hardware": {"cpu_count": 2, "gpus": []},
    **{
        stage: {
            mode: {"points": [{"workers": 1, "efficiency": 1.0}, {"workers": 2, "efficiency": 0.9}]}
            for mode in ("strong", "weak")
        }
        for stage in ("features", "train")
    },
}

LAKE_FILES = {"files": 3, "partitions": 3, "bytes": 3 * 2**20, "median_file_bytes": 2**20}  # a file per day


def cpu_run() -> dict:
    """A complete CPU pipeline run's evidence, as `gather_evidence` assembles it."""
    from tasks.core.config import flatten

    return {
        "run": {
            "run_id": "r1",
            "status": "FINISHED",
            "params": flatten(CONFIG),
            "metrics": {
                "pr_auc": 0.5,
                "roc_auc": 0.9,
                "f1": 0.5,
                "recall_at_p90": 0.2,
                "baseline_pr_auc": 0.5,
                "rule_pr_auc": 0.2,
            },
            "metric_steps": {"train_loss": 8, "val_pr_auc": 8},
            "tags": {"code_version": "abc", "data_fingerprint": "def"},
            "artifacts": ["plots/pr_curve.png", "profile/config.json", "environment/environment.json"],
            "logged_models": 1,
        },
        "config": CONFIG,
        "environment": {
            "python": "3.11.7",
            "packages": {"torch": "2.13.0", "prefect": "3.9.1", "pyspark": "4.2.0"},
            "hardware": {"cpu_count": 2, "gpus": [], "driver": None},
        },
        "manifests": {
            "validate": {
                "quarantine_rate": 0.01,
                "config": {"max_quarantine_rate": 0.2},
                "gx_success": {"kpi_rows": True, "topology": True},
            },
            "ingest": {
                "rows_in": 100,
                "rows_out": 99,
                "rows_quarantined": 1,
                "spark_conf": dict(SPARK),
                "parquet_block_size_bytes": 256 * 2**20,
                "sources": {
                    "kpi": {"parquet": {**LAKE_FILES, "full_row_group_bytes": [], "max_row_group_bytes": 2**20}}
                },
            },
            "train": {"device": "cpu", "kernel_timeline": {}, "gpu_utilization": {"available": False}},
        },
        "scaling": copy.deepcopy(SCALING),
        "scaling_path": "bench/results/scaling.json",
        "probes": {"hardware": {"gpus": []}, "topo": {}, "infiniband": [], "env": {}},
    }


def gpu_run() -> dict:
    """The same run trained on one H200, with what the train stage records there."""
    ev = cpu_run()
    ev["manifests"]["train"] = {
        "device": "cuda",
        "memory_fraction": 0.8,
        "gpu_utilization": {
            "available": True,
            "sufficient": True,
            "mean": 71.0,
            "steady_mean": 93.6,
            "steady_samples": 240,
            "steady_seconds": 41.0,
            "source": "nvmlDeviceGetSamples",
            "kernel_busy_fraction": 0.95,
        },
        "kernel_timeline": {
            "kind": "torch.profiler chrome trace",
            "file": "trace.json",
            "cuda_kernels": 37,
            "top_kernels": [{"kernel": "sm90_bf16_gemm", "total_us": 812.0, "calls": 30}],
        },
    }
    ev["environment"]["hardware"] = {"gpus": [{"index": 0, "name": "NVIDIA H200", "memory_gb": 139.8}], "driver": "580"}
    ev["scaling"]["hardware"] = copy.deepcopy(ev["environment"]["hardware"])  # measured on the same kind of host
    ev["manifests"]["ingest"]["spark_conf"]["spark.executor.memory"] = "173834m"  # 139.8 x 1.2 + 2 GB
    return ev


def result(ev: dict, check_id: str) -> dict:
    report = evaluate(ev, CHECKS)
    (r,) = [c for c in report["checks"] if c["id"] == check_id]
    return {**r, "verdict": report["verdict"]}


def broken(ev: dict, check_id: str, remedy_part: str) -> dict:
    r = result(ev, check_id)
    assert r["status"] == FAIL and remedy_part in r["remedy"] and r["verdict"] == FAIL, r
    return r


def test_a_complete_cpu_run_passes_with_the_gpu_checks_not_applicable():
    report = evaluate(cpu_run(), CHECKS)
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert report["verdict"] == PASS, report
    for gpu_check in ("kernel_timeline", "gpu_utilization", "gpu_memory_fraction_set", "nccl_matrix_symmetric"):
        assert status[gpu_check] == NA
    assert status["executor_memory_rule"] == NA and all(c["remedy"] == "" for c in report["checks"])
    assert "PASS" in to_markdown(report) and public(report)["verdict"] == PASS


def test_a_run_started_from_a_lake_has_no_ingest_checks():
    ev = cpu_run()
    del ev["manifests"]["ingest"], ev["manifests"]["validate"]
    for check in ("spark_dynamic_allocation_off", "max_direct_memory_set", "parquet_row_groups", "validation_passed"):
        r = result(ev, check)
        assert r["status"] == NA and "no" in r["evidence"], r


def test_kernel_timeline():
    assert "sm90_bf16_gemm" in result(gpu_run(), "kernel_timeline")["evidence"]
    ev = gpu_run()
    ev["manifests"]["train"]["kernel_timeline"] = {"kind": None, "file": None, "cuda_kernels": 0}
    broken(ev, "kernel_timeline", "nsys profile")
    ev = gpu_run()
    ev["manifests"]["train"]["kernel_timeline"]["cuda_kernels"] = 0
    assert "no CUDA kernel events" in broken(ev, "kernel_timeline", "trace.json")["evidence"]


def test_spark_dynamic_allocation_off():
    assert result(cpu_run(), "spark_dynamic_allocation_off")["status"] == PASS
    ev = cpu_run()
    ev["manifests"]["ingest"]["spark_conf"]["spark.dynamicAllocation.enabled"] = "true"
    broken(ev, "spark_dynamic_allocation_off", "spark.dynamicAllocation.enabled=false")
    del ev["manifests"]["ingest"]["spark_conf"]["spark.dynamicAllocation.enabled"]
    assert "unset" in broken(ev, "spark_dynamic_allocation_off", "ingest.extra_conf")["evidence"]


def test_nccl_matrix_symmetric():
    ev = cpu_run()
    assert "needs at least 2" in result(ev, "nccl_matrix_symmetric")["evidence"]
    ev["probes"]["hardware"]["gpus"] = [{"index": i} for i in range(2)]
    ev["probes"]["nccl"] = {"matrix_gbps": [[0.0, 381.0], [377.0, 0.0]]}
    assert result(ev, "nccl_matrix_symmetric")["status"] == PASS
    ev["probes"]["nccl"] = {"matrix_gbps": [[0.0, 381.0], [120.0, 0.0]]}
    assert "(0, 1)" in broken(ev, "nccl_matrix_symmetric", "nvidia-smi topo -m")["evidence"]
    del ev["probes"]["nccl"]
    ev["probes"]["nccl_error"] = "RuntimeError: NCCL error"
    assert "NCCL error" in broken(ev, "nccl_matrix_symmetric", "nvlink")["evidence"]


def test_gpu_utilization():
    r = result(gpu_run(), "gpu_utilization")
    assert r["status"] == PASS and "93.6 %" in r["evidence"] and "kernel-busy 95.0%" in r["evidence"]
    ev = gpu_run()
    ev["manifests"]["train"]["gpu_utilization"]["steady_mean"] = 61.0
    broken(ev, "gpu_utilization", "batch_size")
    ev["manifests"]["train"]["gpu_utilization"] = {"available": False, "reason": "NVML unavailable"}
    assert "NVML unavailable" in broken(ev, "gpu_utilization", "utilization plot")["evidence"]


def test_gpu_utilization_of_a_short_run_is_insufficient_evidence_never_a_verdict():
    for steady_mean in (30.0, 99.0):  # a coin flip either way: neither pass nor fail
        ev = gpu_run()
        u = ev["manifests"]["train"]["gpu_utilization"]
        u.update(steady_mean=steady_mean, steady_samples=8, steady_seconds=4.4, sufficient=False)
        r = result(ev, "gpu_utilization")
        assert r["status"] == WARN and "insufficient evidence" in r["evidence"] and r["verdict"] == PASS


def test_mlflow_complete():
    assert result(cpu_run(), "mlflow_complete")["status"] == PASS
    for breaking, expect in [
        (lambda e: e["run"]["params"].pop("train.lr"), "param train.lr"),
        (lambda e: e["run"]["params"].pop("bench.full.rows"), "param bench.full.rows"),
        (lambda e: e["run"]["metrics"].pop("baseline_pr_auc"), "metric baseline_pr_auc"),
        (lambda e: e["run"]["metric_steps"].update(train_loss=1), "per-epoch metric train_loss"),
        (lambda e: e["run"]["tags"].pop("data_fingerprint"), "tag data_fingerprint"),
        (lambda e: e["run"].update(logged_models=0), "artifact model"),
        (lambda e: e["run"].update(status="FAILED"), "status FINISHED"),
        (lambda e: e["run"].update(artifacts=[]), "artifact plots/*.png"),
    ]:
        ev = cpu_run()
        breaking(ev)
        assert expect in broken(ev, "mlflow_complete", "Rerun the pipeline")["evidence"]


def test_validation_passed_reports_gx_results():
    r = result(cpu_run(), "validation_passed")
    assert r["status"] == PASS and "GX: 2 of 2 suites passed" in r["evidence"]
    ev = cpu_run()
    ev["manifests"]["validate"]["gx_success"]["kpi_rows"] = False
    assert "GX: 1 of 2 suites passed (not: kpi_rows)" in result(ev, "validation_passed")["evidence"]
    ev["manifests"]["validate"]["quarantine_rate"] = 0.35
    broken(ev, "validation_passed", "quarantine Parquet")
    ev = cpu_run()
    ev["manifests"]["ingest"]["rows_out"] -= 3
    assert "lost 3 rows" in broken(ev, "validation_passed", "GX Data Docs")["evidence"]
    # the tolerated dirt in the expectations themselves (mostly): then a failed GX suite fails the check
    ev = cpu_run()
    ev["manifests"]["validate"]["gx_mostly"] = 0.8
    r = result(ev, "validation_passed")
    assert r["status"] == PASS and "2 of 2 suites passed (each row rule needs 80% of rows)" in r["evidence"]
    ev["manifests"]["validate"]["gx_success"]["kpi_rows"] = False
    assert "(not: kpi_rows)" in broken(ev, "validation_passed", "GX Data Docs")["evidence"]


def test_executor_memory_rule():
    assert result(cpu_run(), "executor_memory_rule")["status"] == NA
    assert result(gpu_run(), "executor_memory_rule")["status"] == PASS
    ev = gpu_run()
    ev["manifests"]["ingest"]["spark_conf"]["spark.executor.memory"] = "16g"
    broken(ev, "executor_memory_rule", "MaxDirectMemorySize")


def test_max_direct_memory_set():
    ev = cpu_run()
    ev["manifests"]["ingest"]["spark_conf"]["spark.executor.extraJavaOptions"] = "-Xss4m"
    assert "spark.executor.extraJavaOptions" in broken(ev, "max_direct_memory_set", "Executor OOM")["evidence"]


def test_gpu_memory_fraction_set():
    assert result(gpu_run(), "gpu_memory_fraction_set")["status"] == PASS
    ev = gpu_run()
    ev["manifests"]["train"]["memory_fraction"] = None
    broken(ev, "gpu_memory_fraction_set", "CUDA OOM from fragmentation")


def test_parquet_row_groups():
    ev = cpu_run()
    ev["manifests"]["ingest"]["parquet_block_size_bytes"] = 8 * 2**20
    broken(ev, "parquet_row_groups", "parquet_block_size_mb=256")
    ev = cpu_run()
    ev["manifests"]["ingest"]["sources"]["kpi"]["parquet"]["full_row_group_bytes"] = [250 * 2**20] * 3
    assert "median 250 MB" in result(ev, "parquet_row_groups")["evidence"]
    ev["manifests"]["ingest"]["sources"]["kpi"]["parquet"]["full_row_group_bytes"] = [10 * 2**20] * 3
    assert result(ev, "parquet_row_groups")["status"] == WARN


def test_parquet_row_groups_judges_the_files_written():
    ev = cpu_run()
    assert "no file could be larger" in result(ev, "parquet_row_groups")["evidence"]  # a whole day per file
    facts = ev["manifests"]["ingest"]["sources"]["kpi"]["parquet"]
    facts.update(files=42, partitions=14, bytes=290 * 2**20, median_file_bytes=int(6.9 * 2**20))  # 3 files a day
    r = result(ev, "parquet_row_groups")
    assert r["status"] == WARN and "42 files in 14 date directories" in r["evidence"]
    assert "14 files would hold it" in r["evidence"]
    facts.update(files=2, partitions=1, bytes=400 * 2**20)  # one day over the target: two files are needed
    assert result(ev, "parquet_row_groups")["status"] == PASS
    del facts["partitions"]  # a manifest that does not describe its files cannot pass on configuration alone
    assert result(ev, "parquet_row_groups")["status"] == WARN


def test_scaling_report_present():
    ev = cpu_run()
    ev["scaling"] = None
    broken(ev, "scaling_report_present", "faultline bench scaling")
    ev = cpu_run()
    del ev["scaling"]["train"]
    broken(ev, "scaling_report_present", "faultline bench scaling")


def test_scaling_report_must_come_from_the_runs_kind_of_host():
    assert result(cpu_run(), "scaling_report_present")["status"] == PASS
    assert result(gpu_run(), "scaling_report_present")["status"] == PASS
    ev = gpu_run()
    ev["scaling"]["hardware"] = {"cpu_count": 2, "gpus": []}  # the committed 2-core report beside a GPU run
    r = broken(ev, "scaling_report_present", "own kind of host")
    assert "2-core CPU" in r["evidence"] and "1x NVIDIA H200" in r["evidence"]
    ev = cpu_run()
    ev["environment"]["hardware"]["cpu_count"] = 16
    broken(ev, "scaling_report_present", "own kind of host")
    ev["environment"].pop("hardware")
    assert result(ev, "scaling_report_present")["status"] == NA


def test_seeds_and_environment_recorded():
    ev = cpu_run()
    ev["run"]["params"].pop("train.seed")
    broken(ev, "seeds_and_environment_recorded", "environment.json")
    ev = gpu_run()
    ev["environment"]["hardware"]["driver"] = None
    assert "driver" in broken(ev, "seeds_and_environment_recorded", "seeds")["evidence"]


def test_horovod_infiniband():
    ev = cpu_run()
    ev["probes"]["infiniband"] = ["mlx5_0"]
    r = result(ev, "horovod_infiniband")
    assert r["status"] == WARN and "-mca btl ^openib" in r["remedy"] and r["verdict"] == PASS
    ev["probes"]["env"]["HOROVOD_MPI_ARGS"] = "-mca btl ^openib"
    assert result(ev, "horovod_infiniband")["status"] == PASS


def test_a_check_that_cannot_read_its_evidence_fails():
    ev = gpu_run()
    ev["manifests"]["train"]["gpu_utilization"] = "garbage"
    r = result(ev, "gpu_utilization")
    assert r["status"] == FAIL and "could not evaluate" in r["evidence"]


def test_doctor_names_the_fix_when_something_is_missing():
    ev = {
        "probes": {"hardware": {"gpus": [{"index": 0, "name": "H200", "memory_gb": 139.8}], "driver": "580"}},
        "doctor": {
            "java": {"found": False},
            "pyspark": {"found": True, "version": "4.2.0"},
            "horovod": {
                "found": True,
                "frameworks": {"PyTorch": True},
                "controllers": {"Gloo": True},
                "tensor_operations": {"NCCL": False, "Gloo": True},
            },
            "nccl": {"found": True, "version": "2.27.7"},
            "cudf": {"found": False, "error": "ImportError"},
            "dask_cuda": {"found": True, "version": "26.10"},
            "cupy": {"found": True},
        },
    }
    report = evaluate(ev, DOCTOR_CHECKS)
    by = {c["id"]: c for c in report["checks"]}
    assert by["java"]["status"] == FAIL and "Java runtime" in by["java"]["remedy"]
    assert by["cudf"]["status"] == FAIL and "gpu extra" in by["cudf"]["remedy"]
    assert by["horovod_build"]["status"] == WARN and "NCCL" in by["horovod_build"]["remedy"]
    assert report["verdict"] == FAIL


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_every_check_names_what_it_reads_and_a_remedy(check):
    assert check.reads and check.remedy and check.title
