import pytest
from pydantic import ValidationError

from tasks.core.config import ConfigError, load_config, parse_overrides


def test_profiles_load_and_differ():
    local, gpu, dgx = load_config("local"), load_config("gpu"), load_config("dgx")
    assert local.features.cluster == "local" and gpu.features.cluster == "cuda"
    assert dgx.features.protocol == "ucx" and local.train.engine == "horovod"


def test_overrides_are_typed():
    cfg = load_config("local", ["train.epochs=3", "features.windows=[4, 2]", "workload.topology=topozoo/Abilene"])
    assert cfg.train.epochs == 3
    assert cfg.features.windows == (2, 4)
    assert cfg.workload.topology == "topozoo/Abilene"


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"unknown key 'train\.epoch'"):
        load_config("local", ["train.epoch=3"])


def test_unknown_section_is_named_with_the_full_key():
    with pytest.raises(ConfigError, match=r"unknown key 'trian\.epochs': the config has no 'trian'"):
        load_config("local", ["trian.epochs=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'a\.b\.c': the config has no 'a' \(known: bench, "):
        load_config("local", ["a.b.c=1"])
    with pytest.raises(ConfigError, match=r"section 'train' has no 'epoch' \(did you mean 'train\.epochs'\?"):
        load_config("local", ["train.epoch=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'train\.x\.y': section 'train' has no 'x'"):
        load_config("local", ["train.x.y=1"])
    cfg = load_config("local", ['ingest.extra_conf={"spark.x": "1"}'])  # a mapping field takes any key below it
    assert cfg.ingest.extra_conf == {"spark.x": "1"}


def test_bad_value_names_key_and_value():
    with pytest.raises(ConfigError, match=r"train\.epochs: .*'abc'"):
        load_config("local", ["train.epochs=abc"])
    with pytest.raises(ConfigError, match=r"workload\.dirt"):
        load_config("local", ["workload.dirt=3"])


def test_malformed_override_and_missing_profile():
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_overrides(["epochs"])
    with pytest.raises(ConfigError, match="known profiles"):
        load_config("nope")


def test_config_is_frozen_and_flattens():
    cfg = load_config("local")
    with pytest.raises(ValidationError):
        cfg.train.epochs = 1
    flat = cfg.flat()
    assert flat["train.engine"] == "horovod" and "validate.max_quarantine_rate" in flat


@pytest.mark.parametrize("key", ["topozoo/Nowhere", "../../etc/passwd", "topozoo/../../../x", "/abs/path", ""])
def test_topology_must_be_a_topohub_key(key):
    with pytest.raises(ConfigError, match=r"workload\.topology.*unknown topology"):
        load_config("local", [f"workload.topology={key}"])


def test_nested_overrides_reach_the_bench_sizes():
    cfg = load_config("local", ["bench.size=small", "bench.small.rows=12345", "bench.max_workers=3"])
    assert cfg.bench.sized.rows == 12345 and cfg.bench.sized.topology == "topozoo/Abilene"
    assert cfg.flat()["bench.small.rows"] == "12345"
    with pytest.raises(ConfigError, match=r"unknown key 'bench\.small\.rowz'"):
        load_config("local", ["bench.small.rowz=1"])


@pytest.mark.parametrize("value", [".inf", ".nan", "-1"])
def test_numbers_are_finite_and_bounded(value):
    with pytest.raises(ConfigError, match=r"train\.lr"):
        load_config("local", [f"train.lr={value}"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epochs=true", r"train\.epochs: .*expected a number, got a boolean \(true\)"),
        ("bench.max_workers=false", r"bench\.max_workers: .*got a boolean"),
        ("paths.root=", r"paths\.root: .*must name a directory"),
        ("paths.root='  '", r"paths\.root: .*must name a directory"),
    ],
)
def test_booleans_for_numbers_and_an_empty_root_are_rejected(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("local", [override])
    assert load_config("local", ["evaluate.register_model=false"]).evaluate.register_model is False


def test_stage_plan_rejects_impossible_requests(tmp_path):
    from tasks.core.config import stage_plan

    assert stage_plan("validate", "evaluate") == ("validate", "ingest", "features", "train", "evaluate")
    with pytest.raises(ConfigError, match="comes after"):
        stage_plan("train", "ingest")
    with pytest.raises(ConfigError, match="needs lake"):
        stage_plan("features", "evaluate")
    with pytest.raises(ConfigError, match="not an ingest output"):
        stage_plan("features", "evaluate", str(tmp_path))


def test_make_ui_tracking_server_is_the_default_not_an_override(monkeypatch):
    monkeypatch.setenv("FAULTLINE_MLFLOW_URI", "http://127.0.0.1:5123")
    assert load_config("local").mlflow.tracking_uri == "http://127.0.0.1:5123"
    assert load_config("local", ["mlflow.tracking_uri=http://10.0.0.1:5000"]).mlflow.tracking_uri.startswith(
        "http://10."
    )
    monkeypatch.delenv("FAULTLINE_MLFLOW_URI")
    assert load_config("local").mlflow.tracking_uri is None  # the SQLite store under paths.root


def test_training_hosts_are_host_slots_summing_to_num_proc():
    cfg = load_config("local", ["train.num_proc=16", "train.hosts=[dgx-01:8, dgx-02:8]"])
    assert cfg.train.hosts == ("dgx-01:8", "dgx-02:8")
    with pytest.raises(ConfigError, match="slots sum to 12, train.num_proc is 16"):
        load_config("local", ["train.num_proc=16", "train.hosts=[dgx-01:8, dgx-02:4]"])
    with pytest.raises(ConfigError, match="expected host:slots"):
        load_config("local", ["train.num_proc=8", "train.hosts=[dgx-01]"])
    with pytest.raises(ConfigError, match="needs train.engine=horovod"):
        load_config("local", ["train.engine=ddp", "train.num_proc=2", "train.hosts=[a:1, b:1]"])


def test_the_cli_says_its_version_and_what_a_mistyped_command_meant(capsys):
    from flows.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    assert capsys.readouterr().out.startswith("faultline ")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["rnu"])
    assert exit_.value.code == 2 and "did you mean 'run'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "e2f"])
    assert "did you mean 'e2e'?" in capsys.readouterr().err
