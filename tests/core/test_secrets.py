"""Secrets never reach MLflow params, manifests or recorded config; they come from the
environment where they are used."""

import json

import pytest

from tasks.core.config import load_config
from tasks.core.errors import ConfigError
from tasks.core.runtime import Hardware, spark_conf
from tasks.core.secrets import redact, redact_text
from tasks.core.store import manifest_header
from tasks.core.tracking import tracking_uri

SECRET = "hunter2-s3cr3t"
CPU = Hardware(cpu_count=2, memory_gb=24, source="test")


def _cfg(extra: dict):
    return load_config(
        "local",
        [
            f"ingest.extra_conf={json.dumps(extra)}",
            f"mlflow.tracking_uri=https://alice:{SECRET}@mlflow.example:5000",
        ],
    )


def test_literal_secrets_are_masked_in_every_record():
    cfg = _cfg({"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.ssl.keyStorePassword": SECRET})
    records = [
        cfg.flat(),  # MLflow params
        manifest_header("ingest", {"raw": "x"}, cfg.ingest, 1.0),  # every stage manifest
        redact(cfg.as_dict()),  # the profile/config.json artifact
    ]
    for record in records:
        text = json.dumps(record)
        assert SECRET not in text and "***" in text
    assert cfg.flat()["mlflow.tracking_uri"] == "https://alice:***@mlflow.example:5000"
    assert cfg.flat()["ingest.shuffle_partitions"] == "4"  # the rest untouched


def test_placeholders_are_kept_in_records_and_resolved_where_used(monkeypatch):
    monkeypatch.setenv("FAULTLINE_TEST_S3_SECRET", SECRET)
    cfg = _cfg({"spark.hadoop.fs.s3a.secret.key": "${env:FAULTLINE_TEST_S3_SECRET}"})
    assert "${env:FAULTLINE_TEST_S3_SECRET}" in json.dumps(cfg.flat()) and SECRET not in json.dumps(cfg.flat())
    assert spark_conf(cfg.ingest, CPU, None)["spark.hadoop.fs.s3a.secret.key"] == SECRET
    monkeypatch.delenv("FAULTLINE_TEST_S3_SECRET")
    with pytest.raises(ConfigError, match=r"ingest.extra_conf\['spark.hadoop.fs.s3a.secret.key'\].*not set"):
        spark_conf(cfg.ingest, CPU, None)


def test_tracking_uri_credentials_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FAULTLINE_TEST_MLFLOW_PW", SECRET)
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    uri = tracking_uri("https://alice:${env:FAULTLINE_TEST_MLFLOW_PW}@mlflow.example", tmp_path)
    assert uri == f"https://alice:{SECRET}@mlflow.example" and SECRET not in redact_text(uri)
    # MLflow prints "View run ... at: <tracking uri>/#/..." when a run ends: off where the URI holds a password
    from mlflow.environment_variables import MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT

    assert MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True


@pytest.mark.parametrize(
    "override",
    [
        f"mlflow.tracking_uri=https://alice:{SECRET}@mlflow.example:5000",
        'ingest.extra_conf={"spark.hadoop.fs.s3a.secret.key": "' + SECRET + '"}',
    ],
)
def test_a_literal_secret_in_an_override_is_refused_before_it_reaches_prefect(override):
    """Overrides become the flow's parameters, which Prefect stores and shows unmasked: refused with the hint."""
    from tasks.core.secrets import refuse_literal_secrets

    with pytest.raises(ConfigError, match=r"literal secret .* write .*=\$\{env:NAME\}") as err:
        refuse_literal_secrets([override])
    assert SECRET not in str(err.value)
    refuse_literal_secrets(["mlflow.tracking_uri=https://alice:${env:PW}@mlflow.example", "train.epochs=3"])
