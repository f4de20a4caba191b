"""Every benchmark result carries where it comes from: date, card, commit and command."""

from __future__ import annotations

import re
import sys


def test_provenance_names_the_card_the_commit_and_the_command(monkeypatch):
    from tasks.benchmark import provenance

    monkeypatch.setattr(sys, "argv", ["/x/.venv/bin/faultline", "-v", "bench", "e2e", "--profile", "gpu"])
    gpu = provenance({"hardware": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "cpu_count": 16}})
    assert gpu["card"] == "1x NVIDIA H100 80GB HBM3" and gpu["command"] == "faultline bench e2e --profile gpu"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", gpu["date"])
    assert re.match(r"([0-9a-f]{40}(\+changes)?|code [0-9a-f]{16} \(not a git checkout\))$", gpu["commit"])
    cpu = provenance({"hardware": {"gpus": [], "cpu_count": 2}})
    assert cpu["card"] == "2-core CPU (no GPU)"
