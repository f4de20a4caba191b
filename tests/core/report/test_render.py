"""The report's pieces from literal evidence: what the profiler recorded, what a benchmark's host was."""

from __future__ import annotations

from tasks.core.report.gather import same_host
from tasks.core.report.render import top_kernels


def test_the_top_kernels_table_reads_the_profiler_s_fields():
    top = [{"calls": 5, "kernel": "void GRU_elementWise_bp2<__half>(int)", "total_us": 177581.1}]
    html = top_kernels(top)
    assert "GRU_elementWise_bp2&lt;__half&gt;" in html and "<td>5</td>" in html and "177.6" in html


def test_a_benchmark_counts_only_on_its_own_kind_of_host():
    h100 = {"device": "NVIDIA H100 80GB HBM3"}
    assert same_host(h100, "NVIDIA H100 80GB HBM3")
    assert not same_host(h100, "NVIDIA H200")
    assert not same_host(h100, "")  # a CPU run never shows a GPU host's curve as its own
    assert same_host({"device": "2-core CPU"}, "") and not same_host({"device": "2-core CPU"}, "NVIDIA H200")
    assert not same_host(None, "NVIDIA H200")
