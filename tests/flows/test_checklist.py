"""The pre-submission checklist over a real pipeline run: one test per check, each shown passing on a run
that satisfies it and failing (with its remedy) on a run broken for it. GPU runs are built from the real
CPU run's evidence with the GPU facts a device run records (bench/results/h200/ holds a real one)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tasks.core import checklist as cl
from tests.helpers import faultline, last_json

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.horovod]

SCALING = {
    "device": "cpu",
    **{
        stage: {
            mode: {"points": [{"workers": 1, "efficiency": 1.0}, {"workers": 2, "efficiency": 0.9}]}
            for mode in ("strong", "weak")
        }
        for stage in ("features", "train")
    },
}


@pytest.fixture(scope="module")
def evidence(pipeline_run):
    """The real run's evidence, read back from MLflow exactly as the flow reads it."""
    from tasks.core.config import load_config
    from tasks.core.evidence import live_probes, run_evidence
    from tasks.tracking import tracker_for

    root, summary, _ = pipeline_run
    cfg = load_config("local", [f"paths.root={root}"])
    ev = run_evidence(tracker_for(cfg), summary["mlflow_run_id"])
    ev["probes"] = live_probes(nccl=False)
    ev["scaling"], ev["scaling_path"] = SCALING, "bench/results/scaling.json"
    return ev


def gpu_run(ev):
    """The same run as if trained on one H200 (what train_task records there)."""
    ev = copy.deepcopy(ev)
    t = ev["manifests"]["train"]
    t["device"] = "cuda"
    t["memory_fraction"] = 0.8
    t["gpu_utilization"] = {
        "available": True,
        "mean": 41.0,
        "steady_mean": 93.6,
        "steady_samples": 40,
        "steady_definition": "training steps of epochs 2..",
    }
    t["kernel_timeline"] = {
        "kind": "torch.profiler chrome trace",
        "file": "trace.json",
        "cuda_kernels": 37,
        "top_kernels": [{"kernel": "ampere_bf16_s16816gemm", "total_us": 812.0, "calls": 30}],
    }
    ev["environment"]["hardware"]["gpus"] = [{"index": 0, "name": "NVIDIA H200", "memory_gb": 139.8}]
    ev["environment"]["hardware"]["driver"] = "580.95.05"
    ev["manifests"]["ingest"]["spark_conf"]["spark.executor.memory"] = (
        "173834m"  # 139.8 x 1.2 + 2 GB, as runtime._mb writes it
    )
    return ev


def outcome(ev, check_id):
    report = cl.evaluate(ev)
    (r,) = [c for c in report["checks"] if c["id"] == check_id]
    return r, report


def assert_breaks(ev, check_id, remedy_part):
    r, report = outcome(ev, check_id)
    assert r["status"] == cl.FAIL, r
    assert remedy_part in r["remedy"]
    assert report["verdict"] == "fail"
    return r


def test_real_cpu_run_passes_with_gpu_checks_not_applicable(evidence):
    report = cl.evaluate(evidence)
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert report["verdict"] == "pass", [c for c in report["checks"] if c["status"] == "fail"]
    for gpu_check in (
        "kernel_timeline",
        "gpu_utilization",
        "gpu_memory_fraction_set",
        "nccl_matrix_symmetric",
        "executor_memory_rule",
    ):
        assert status[gpu_check] == cl.NA, gpu_check
    assert all(c["remedy"] == "" for c in report["checks"])


def test_kernel_timeline(evidence):
    r, _ = outcome(gpu_run(evidence), "kernel_timeline")
    assert r["status"] == cl.PASS and "ampere_bf16_s16816gemm" in r["evidence"]
    broken = gpu_run(evidence)
    broken["manifests"]["train"]["kernel_timeline"] = {"kind": None, "file": None, "cuda_kernels": 0}
    assert_breaks(broken, "kernel_timeline", "nsys profile")
    cpu_only = gpu_run(evidence)
    cpu_only["manifests"]["train"]["kernel_timeline"]["cuda_kernels"] = 0
    assert "no CUDA kernel events" in assert_breaks(cpu_only, "kernel_timeline", "trace.json")["evidence"]


def test_spark_dynamic_allocation_off(evidence):
    assert outcome(evidence, "spark_dynamic_allocation_off")[0]["status"] == cl.PASS
    broken = copy.deepcopy(evidence)
    broken["manifests"]["ingest"]["spark_conf"]["spark.dynamicAllocation.enabled"] = "true"
    assert_breaks(broken, "spark_dynamic_allocation_off", "spark.dynamicAllocation.enabled=false")


def test_nccl_matrix_symmetric(evidence):
    r, _ = outcome(evidence, "nccl_matrix_symmetric")
    assert r["status"] == cl.NA and "pairwise matrix needs at least 2" in r["evidence"]
    two = copy.deepcopy(evidence)
    two["probes"]["hardware"]["gpus"] = [{"index": i, "name": "H200", "memory_gb": 139.8} for i in range(2)]
    two["probes"]["nccl"] = {"matrix_gbps": [[0.0, 381.0], [377.0, 0.0]]}
    assert outcome(two, "nccl_matrix_symmetric")[0]["status"] == cl.PASS
    two["probes"]["nccl"] = {"matrix_gbps": [[0.0, 381.0], [120.0, 0.0]]}
    assert "(0, 1)" in assert_breaks(two, "nccl_matrix_symmetric", "nvidia-smi topo -m")["evidence"]
    del two["probes"]["nccl"]
    two["probes"]["nccl_error"] = "RuntimeError: NCCL error"
    assert "NCCL error" in assert_breaks(two, "nccl_matrix_symmetric", "nvlink")["evidence"]


def test_nccl_pairwise_probe_builds_a_matrix_over_gloo():
    """The probe's logic with 2 CPU ranks (NCCL on GPUs; the same code path)."""
    from tasks.core.probes import asymmetry, pairwise_bandwidth

    out = pairwise_bandwidth(2, "gloo", size_mb=4, iters=3)
    m = out["matrix_gbps"]
    assert len(m) == 2 and m[0][0] == 0 and m[0][1] > 0 and m[1][0] > 0
    assert asymmetry(m)[1] == (0, 1)


def test_gpu_utilization(evidence):
    r, _ = outcome(gpu_run(evidence), "gpu_utilization")
    assert r["status"] == cl.PASS and "93.6 %" in r["evidence"]
    assert outcome(evidence, "gpu_utilization")[0]["status"] == cl.NA  # CPU run: never pass
    low = gpu_run(evidence)
    low["manifests"]["train"]["gpu_utilization"]["steady_mean"] = 61.0
    assert_breaks(low, "gpu_utilization", "batch_size")
    none = gpu_run(evidence)
    none["manifests"]["train"]["gpu_utilization"] = {"available": False}
    assert_breaks(none, "gpu_utilization", "utilization plot")


def test_mlflow_complete(evidence):
    assert outcome(evidence, "mlflow_complete")[0]["status"] == cl.PASS
    for breaking, expect in [
        (lambda e: e["run"]["params"].pop("train.lr"), "param train.lr"),
        (lambda e: e["run"]["metrics"].pop("baseline_pr_auc"), "metric baseline_pr_auc"),
        (lambda e: e["run"]["metric_steps"].update(train_loss=1), "per-epoch metric train_loss"),
        (lambda e: e["run"]["tags"].pop("data_fingerprint"), "tag data_fingerprint"),
        (lambda e: e["run"].update(logged_models=0), "artifact model"),
        (lambda e: e["run"].update(status="FAILED"), "status FINISHED"),
    ]:
        broken = copy.deepcopy(evidence)
        breaking(broken)
        assert expect in assert_breaks(broken, "mlflow_complete", "Rerun the pipeline")["evidence"]


def test_validation_passed(evidence):
    assert outcome(evidence, "validation_passed")[0]["status"] == cl.PASS
    broken = copy.deepcopy(evidence)
    broken["manifests"]["validate"]["quarantine_rate"] = 0.35
    assert_breaks(broken, "validation_passed", "quarantine Parquet")
    lost = copy.deepcopy(evidence)
    lost["manifests"]["ingest"]["rows_out"] -= 3
    assert "lost 3 rows" in assert_breaks(lost, "validation_passed", "GX Data Docs")["evidence"]


def test_executor_memory_rule(evidence):
    assert outcome(evidence, "executor_memory_rule")[0]["status"] == cl.NA
    assert outcome(gpu_run(evidence), "executor_memory_rule")[0]["status"] == cl.PASS
    broken = gpu_run(evidence)
    broken["manifests"]["ingest"]["spark_conf"]["spark.executor.memory"] = "16g"
    assert_breaks(broken, "executor_memory_rule", "MaxDirectMemorySize")


def test_max_direct_memory_set(evidence):
    assert outcome(evidence, "max_direct_memory_set")[0]["status"] == cl.PASS
    broken = copy.deepcopy(evidence)
    conf = broken["manifests"]["ingest"]["spark_conf"]
    conf["spark.executor.extraJavaOptions"] = conf["spark.executor.extraJavaOptions"].replace("MaxDirect", "Max")
    assert_breaks(broken, "max_direct_memory_set", "Executor OOM")


def test_gpu_memory_fraction_set(evidence):
    assert outcome(evidence, "gpu_memory_fraction_set")[0]["status"] == cl.NA
    assert outcome(gpu_run(evidence), "gpu_memory_fraction_set")[0]["status"] == cl.PASS
    broken = gpu_run(evidence)
    broken["manifests"]["train"]["memory_fraction"] = None
    assert_breaks(broken, "gpu_memory_fraction_set", "CUDA OOM from fragmentation")


def test_parquet_row_groups(evidence):
    assert outcome(evidence, "parquet_row_groups")[0]["status"] == cl.PASS
    broken = copy.deepcopy(evidence)
    broken["manifests"]["ingest"]["parquet_block_size_bytes"] = 8 * 2**20
    assert_breaks(broken, "parquet_row_groups", "parquet_block_size_mb=256")
    big = copy.deepcopy(evidence)
    big["manifests"]["ingest"]["sources"]["kpi"]["parquet"]["full_row_group_bytes"] = [250 * 2**20] * 3
    assert outcome(big, "parquet_row_groups")[0]["status"] == cl.PASS


def test_scaling_report_present(evidence):
    assert outcome(evidence, "scaling_report_present")[0]["status"] == cl.PASS
    missing = copy.deepcopy(evidence)
    missing["scaling"] = None
    assert_breaks(missing, "scaling_report_present", "faultline bench scaling")
    partial = copy.deepcopy(evidence)
    del partial["scaling"]["train"]
    assert_breaks(partial, "scaling_report_present", "faultline bench scaling")


def test_seeds_and_environment_recorded(evidence):
    assert outcome(evidence, "seeds_and_environment_recorded")[0]["status"] == cl.PASS
    broken = copy.deepcopy(evidence)
    broken["run"]["params"].pop("train.seed")
    assert_breaks(broken, "seeds_and_environment_recorded", "environment.json")
    no_driver = gpu_run(evidence)
    no_driver["environment"]["hardware"]["driver"] = None
    assert "driver" in assert_breaks(no_driver, "seeds_and_environment_recorded", "seeds")["evidence"]


def test_horovod_infiniband(evidence):
    assert outcome(evidence, "horovod_infiniband")[0]["status"] == cl.NA
    ib = copy.deepcopy(evidence)
    ib["probes"]["infiniband"] = ["mlx5_0"]
    r, report = outcome(ib, "horovod_infiniband")
    assert r["status"] == cl.WARN and "-mca btl ^openib" in r["remedy"] and report["verdict"] == "pass"
    ib["probes"]["env"]["HOROVOD_MPI_ARGS"] = "-mca btl ^openib"
    assert outcome(ib, "horovod_infiniband")[0]["status"] == cl.PASS


def test_a_check_that_cannot_read_its_evidence_fails(evidence):
    broken = copy.deepcopy(evidence)
    broken["manifests"]["train"]["gpu_utilization"] = "garbage"
    broken["manifests"]["train"]["device"] = "cuda"
    r, _ = outcome(broken, "gpu_utilization")
    assert r["status"] == cl.FAIL and "could not evaluate" in r["evidence"]


def test_check_cli_on_the_real_run(pipeline_run, tmp_path):
    """`faultline check --json` through the Prefect flow: exit 0 with a scaling report, 1 without."""
    from mlflow.tracking import MlflowClient

    root, summary, _ = pipeline_run
    results = tmp_path / "results"
    base = ["check", "--run", summary["mlflow_run_id"], "--set", f"paths.root={root}", "--json"]
    proc = faultline(*base, "--set", f"paths.bench_results={results}", root=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["verdict"] == "fail" and out["run_id"] == summary["mlflow_run_id"]
    ids = [c["id"] for c in out["checks"]]
    assert {
        "kernel_timeline",
        "spark_dynamic_allocation_off",
        "nccl_matrix_symmetric",
        "gpu_utilization",
        "mlflow_complete",
    } <= set(ids)
    failed = [c for c in out["checks"] if c["status"] == "fail"]
    assert [c["id"] for c in failed] == ["scaling_report_present"] and "faultline bench scaling" in failed[0]["remedy"]
    assert {c["status"] for c in out["checks"] if c["id"] in ("gpu_utilization", "kernel_timeline")} == {"na"}

    results.mkdir()
    (results / "scaling.json").write_text(json.dumps(SCALING))
    proc = faultline(*base, "--set", f"paths.bench_results={results}", root=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert last_json(proc.stdout)["verdict"] == "pass"
    report_dir = Path(root) / "store" / "checklists" / summary["mlflow_run_id"]
    assert "# Pre-submission checklist: **PASS**" in (report_dir / "checklist.md").read_text()
    assert json.loads((report_dir / "checklist.json").read_text())["verdict"] == "pass"
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    assert {a.path for a in client.list_artifacts(summary["mlflow_run_id"], "checklist")} == {
        "checklist/checklist.json",
        "checklist/checklist.md",
    }
    assert client.get_run(summary["mlflow_run_id"]).data.tags["checklist_verdict"] == "pass"


def test_check_without_any_run_says_so(tmp_path):
    proc = faultline("check", "--set", f"paths.root={tmp_path}", "--json", root=tmp_path)
    assert proc.returncode == 1
    assert "no pipeline run" in proc.stderr and last_json(proc.stdout)["verdict"] == "fail"


def test_doctor_reports_the_environment(tmp_path):
    proc = faultline("doctor", "--json", root=tmp_path)
    out = last_json(proc.stdout)
    status = {c["id"]: c["status"] for c in out["checks"]}
    assert status["java"] == "pass" and status["spark"] == "pass" and status["horovod_build"] == "pass"
    assert status["gpus"] == "na" and status["cudf"] == "na" and status["nccl_matrix_symmetric"] == "na"
    assert proc.returncode == 0 and out["verdict"] == "pass"


def test_doctor_names_the_fix_when_something_is_missing():
    from tasks.core.doctor import DOCTOR_CHECKS

    ev = {
        "probes": {"hardware": {"gpus": [{"index": 0, "name": "H200", "memory_gb": 139.8}], "driver": "580"}},
        "doctor": {
            "java": {"found": False},
            "pyspark": {"found": True, "version": "4.3.0"},
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
    report = cl.evaluate(ev, DOCTOR_CHECKS)
    by = {c["id"]: c for c in report["checks"]}
    assert by["java"]["status"] == "fail" and "openjdk-17" in by["java"]["remedy"]
    assert by["cudf"]["status"] == "fail" and "RAPIDS" in by["cudf"]["remedy"]
    assert by["horovod_build"]["status"] == "warn" and "NCCL" in by["horovod_build"]["remedy"]
    assert report["verdict"] == "fail"
