"""Validation's counts come from GX's own results (one aggregation per suite); Spark's predicates count again only
where GX left a count out. Literal GX results here: no engine."""

from __future__ import annotations

from datetime import UTC, datetime

from tasks.core.stages.rules import kpi_rules
from tasks.core.stages.validate import gx_counts

RULES = kpi_rules(["a", "b"], datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC))


def _result(reason: str | None, unexpected: int | None, kind: str = "expect_column_values_to_not_be_null") -> dict:
    return {
        "expectation_config": {"type": kind, "kwargs": {"column": "x"}, "meta": {"reason": reason} if reason else {}},
        "success": True,
        "result": {"unexpected_count": unexpected},
    }


def _results(counts: dict[str, int | None], malformed: int | None) -> dict:
    rows = [_result(r, n) for r, n in counts.items()] + [_result(None, 3, "expect_compound_columns_to_be_unique")]
    file = [_result(None, None), _result("malformed", malformed)]
    return {"kpi_rows": {"results": rows}, "kpi_file": {"results": file}}


def test_every_rule_and_the_malformed_lines_are_counted_as_gx_counted_them():
    counts = {r.reason: i for i, r in enumerate(RULES)}
    got = gx_counts(_results(counts, 7), "kpi", RULES)
    assert got == {**counts, "malformed": 7} and list(got) == [*counts, "malformed"]


def test_a_count_gx_left_out_makes_spark_count_instead():
    counts = {r.reason: 1 for r in RULES}
    assert gx_counts(_results({**counts, RULES[3].reason: None}, 0), "kpi", RULES) is None
    assert gx_counts(_results(counts, None), "kpi", RULES) is None
    del counts[RULES[0].reason]  # an expectation missing from the suite's results
    assert gx_counts(_results(counts, 0), "kpi", RULES) is None
