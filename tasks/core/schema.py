"""The raw NMS export formats: one place that names every column, type, range and value set."""

from __future__ import annotations

from dataclasses import dataclass

STEP_MINUTES = 5
STEPS_PER_DAY = 24 * 60 // STEP_MINUTES


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "string" | "timestamp" | "double" | "long"
    nullable: bool = False
    min: float | None = None
    max: float | None = None


KPI_COLUMNS: tuple[Column, ...] = (
    Column("timestamp", "timestamp"),
    Column("element_id", "string"),
    Column("cpu_util", "double", min=0.0, max=100.0),
    Column("mem_util", "double", min=0.0, max=100.0),
    Column("temperature_c", "double", min=-20.0, max=120.0),
    Column("traffic_gbps", "double", min=0.0, max=1000.0),
    Column("latency_ms", "double", min=0.0, max=10000.0),
    Column("packet_loss_pct", "double", min=0.0, max=100.0),
    Column("if_errors", "long", min=0, max=1_000_000),
)
KPI_NAMES = tuple(c.name for c in KPI_COLUMNS)
KPI_VALUES = tuple(c.name for c in KPI_COLUMNS[2:])

SEVERITIES = ("cleared", "warning", "minor", "major", "critical")
ALARM_TYPES = ("NODE_DOWN", "NODE_UP", "HIGH_CPU", "HIGH_TEMP", "LINK_DEGRADED", "IF_ERRORS", "NOISE")
ALARM_COLUMNS: tuple[Column, ...] = (
    Column("alarm_id", "string"),
    Column("timestamp", "timestamp"),
    Column("element_id", "string"),
    Column("severity", "string"),
    Column("alarm_type", "string"),
    Column("text", "string", nullable=True),
)
ALARM_NAMES = tuple(c.name for c in ALARM_COLUMNS)
FAULT_ALARM = "NODE_DOWN"

# the Spark conf key that carries ingest.kpi_parse to every stage of a session (tasks.core.stages.readers.read_kpi)
KPI_PARSE_CONF = "spark.faultline.kpiParse"
