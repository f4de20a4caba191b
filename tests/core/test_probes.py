from __future__ import annotations

from pathlib import Path

from tasks.core.probes import asymmetry, parse_check_build, parse_topo_matrix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

DGX4 = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\t0-55\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\t0-55\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\t56-111\t1\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \t56-111\t1\t\tN/A

Legend:
  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_topo_matrix_of_a_four_gpu_nvlink_host():
    t = parse_topo_matrix(DGX4)
    assert t["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert t["links"]["GPU2"]["GPU0"] == "NV18" and t["links"]["GPU1"]["GPU1"] == "X"
    assert t["nvlink_types"] == ["NV18"]


def test_topo_matrix_recorded_on_the_h200():
    """The real one-GPU output (with nvidia-smi's ANSI underline) from a device run."""
    text = (FIXTURES / "nvidia_smi_h200.txt").read_text()
    t = parse_topo_matrix(text[text.index("GPU0") - 10 :])
    assert t["gpus"] == ["GPU0"] and t["links"] == {"GPU0": {"GPU0": "X"}} and t["nvlink_types"] == []


def test_topo_matrix_of_nothing():
    assert parse_topo_matrix("") == {"gpus": [], "links": {}}


def test_check_build_recorded_on_the_h200():
    b = parse_check_build((FIXTURES / "horovodrun_check_build.txt").read_text())
    assert b["frameworks"] == {"TensorFlow": False, "PyTorch": True, "MXNet": False}
    assert b["controllers"]["Gloo"] and not b["controllers"]["MPI"]
    assert b["tensor_operations"]["NCCL"] and b["tensor_operations"]["Gloo"]


def test_asymmetry_finds_the_worst_pair():
    m = [[0, 100, 100], [100, 0, 50], [98, 100, 0]]
    worst, where = asymmetry(m)
    assert where == (1, 2) and abs(worst - 0.5) < 1e-9
    assert asymmetry([[0, 10], [10, 0]]) == (0.0, (0, 1))
