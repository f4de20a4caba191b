"""Spark readers of the raw exports: explicit schemas, timestamps checked before they are cast, and every malformed
line kept in ``_corrupt_record`` with its text (never dropped)."""

from __future__ import annotations

from tasks.core.schema import ALARM_COLUMNS, KPI_COLUMNS, KPI_PARSE_CONF
from tasks.core.stages.raw import CORRUPT, ISO_ZONED, RawLayout


def _spark_type(kind: str):
    from pyspark.sql import types as T

    return {"string": T.StringType(), "timestamp": T.TimestampType(), "double": T.DoubleType(), "long": T.LongType()}[
        kind
    ]


def spark_schema(columns, corrupt: bool = True, timestamps_as_text: bool = False):
    from pyspark.sql import types as T

    def kind(c) -> str:
        return "string" if timestamps_as_text and c.kind == "timestamp" else c.kind

    fields = [T.StructField(c.name, _spark_type(kind(c)), True) for c in columns]
    if corrupt:
        fields.append(T.StructField(CORRUPT, T.StringType(), True))
    return T.StructType(fields)


def _typed_timestamps(df, columns):
    """The timestamp columns, read as text, cast where they match :data:`ISO_ZONED`; a value that does not (or
    names no real instant, e.g. February 30th) makes the row malformed, with the text kept in ``_corrupt_record``.

    Two projections: the checked cast, then the note built from its result. In one, the note repeated the match
    and the cast (the projection's common subexpressions sit inside conditionals, which Spark does not share): a
    third of the KPI read's CPU time (``faultline bench ingest``)."""
    from pyspark.sql import functions as F

    names = [c.name for c in columns if c.kind == "timestamp"]
    typed = {f"_typed_{n}": F.when(F.col(n).rlike(ISO_ZONED), F.col(n).cast("timestamp")) for n in names}
    df = df.withColumns(typed)  # kept apart from the next projection: Spark does not inline a costly reused value
    note = F.lit(None).cast("string")
    for n in reversed(names):
        note = F.when(
            F.col(n).isNotNull() & F.col(f"_typed_{n}").isNull(),
            F.concat(F.lit(f"{n} not ISO-8601 with a zone: "), F.col(n)),
        ).otherwise(note)
    out = df.withColumns({**{n: F.col(f"_typed_{n}") for n in names}, CORRUPT: F.coalesce(F.col(CORRUPT), note)})
    return out.drop(*typed)


def input_files(spark, paths) -> list[str]:
    """The files as Spark's file readers list them (``input_file_name``'s URIs), without reading them."""
    return sorted(spark.read.text([str(p) for p in paths]).inputFiles()) if paths else []


# ingest.kpi_parse=lines: what a KPI token must look like to be typed (the CSV parser's own grammar, written out)
NUMBER = r"^([+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?|NaN|Inf|-Inf)$"
INTEGER = r"^[+-]?[0-9]+$"
_LINE_SEP, _NO_QUOTE = "\u0001", "\u0000"  # no well-formed line holds the separator; no quoting: a line is a field


def read_kpi(spark, layout: RawLayout):
    """All KPI exports as one DataFrame; malformed lines kept in ``_corrupt_record``, never dropped. Parsed as
    ``ingest.kpi_parse`` says (the session's :data:`KPI_PARSE_CONF`): Spark's CSV parser, or :func:`read_kpi_lines`."""
    if spark.conf.get(KPI_PARSE_CONF, "csv") == "lines":
        return read_kpi_lines(spark, layout)
    return read_kpi_csv(spark, layout)


def read_kpi_lines(spark, layout: RawLayout):
    """The KPI exports read a line at a time as one string, then split on commas and typed by the rules here. A
    line is malformed when it has other than one token per column, a control character ``\\u0001``, or a token
    that is not empty and not of its column's type (:data:`NUMBER`, :data:`INTEGER`; a timestamp as in
    :func:`_typed_timestamps`); its text goes to ``_corrupt_record`` and the tokens that did parse are kept, as the
    CSV parser keeps them. The RAPIDS Accelerator reads these files on the GPU, where its CSV parser would drop a
    malformed line (NVIDIA/cudf-spark#2065): a one-column read cannot be malformed."""
    from pyspark.sql import functions as F

    lines = spark.read.csv(
        [str(p) for p in layout.kpi_files],
        schema="_line string, _beyond string",
        sep=_LINE_SEP,
        quote=_NO_QUOTE,
        header=True,
        enforceSchema=True,  # the header is skipped: check_kpi_file has already required it to be KPI_NAMES
        mode="PERMISSIVE",
    )
    tokens = F.split(F.col("_line"), ",", -1)
    bad = [(F.size(tokens) != len(KPI_COLUMNS)) | F.col("_beyond").isNotNull()]
    typed = {}
    for i, c in enumerate(KPI_COLUMNS):
        token = tokens.getItem(i)
        given = token.isNotNull() & (token != "")
        if c.kind in ("string", "timestamp"):  # timestamps are checked and cast by _typed_timestamps
            typed[c.name] = F.when(given, token)
            continue
        grammar = NUMBER if c.kind == "double" else INTEGER
        typed[c.name] = F.when(given & token.rlike(grammar), token.cast(c.kind))
        bad.append(given & typed[c.name].isNull())
    malformed = bad[0]
    for b in bad[1:]:
        malformed = malformed | b
    line = F.when(F.col("_beyond").isNull(), F.col("_line")).otherwise(F.concat_ws(_LINE_SEP, "_line", "_beyond"))
    df = lines.select(*[v.alias(k) for k, v in typed.items()], F.when(malformed, line).alias(CORRUPT))
    df = _typed_timestamps(df, KPI_COLUMNS)
    return df.withColumn("_source_file", F.input_file_name()).withColumn("_seq", F.monotonically_increasing_id())


def read_kpi_csv(spark, layout: RawLayout):
    """All KPI exports through Spark's CSV parser (PERMISSIVE, the malformed line's text kept)."""
    from pyspark.sql import functions as F

    df = spark.read.csv(
        [str(p) for p in layout.kpi_files],
        header=True,
        schema=spark_schema(KPI_COLUMNS, timestamps_as_text=True),
        mode="PERMISSIVE",
        columnNameOfCorruptRecord=CORRUPT,
        # the header is skipped, not matched by name: check_kpi_file has already required it to be exactly
        # KPI_NAMES. (The RAPIDS Accelerator scans CSV only when the schema is enforced; the runtime keeps the scan
        # on the CPU all the same: the plugin's CSV reader leaves the corrupt-record column empty, runtime.py)
        enforceSchema=True,
    )
    df = _typed_timestamps(df, KPI_COLUMNS)
    return df.withColumn("_source_file", F.input_file_name()).withColumn("_seq", F.monotonically_increasing_id())


def read_alarms(spark, layout: RawLayout):
    from pyspark.sql import functions as F

    if not layout.alarm_files:
        return None
    df = spark.read.json(
        [str(p) for p in layout.alarm_files],
        schema=spark_schema(ALARM_COLUMNS, timestamps_as_text=True),
        mode="PERMISSIVE",
        columnNameOfCorruptRecord=CORRUPT,
    )
    df = _typed_timestamps(df, ALARM_COLUMNS)
    return df.withColumn("_source_file", F.input_file_name()).withColumn("_seq", F.monotonically_increasing_id())
