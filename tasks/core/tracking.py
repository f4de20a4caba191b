"""MLflow behind a small seam: one run per pipeline run; stages log into it by run id.

A tracking server that is down never stops or hangs a run: every HTTP call is bounded
(MLflow's own timeout and retry settings, shortened here unless the environment sets them), and once the
server does not answer, the run's remaining calls are journaled under the store (``<store>/tracking-spool``)
with copies of their files, and replayed in order, with their original times, when the server is back: at
the end of the run, at the next run's start, or with ``faultline tracking replay``. ``mlflow.strict=true``
instead rejects a run whose server is unreachable at start (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .secrets import redact_text, resolve

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
# MLflow's defaults (120 s timeout, 7 retries with backoff factor 2) turn an outage into a quarter-hour hang.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
SPOOL = "tracking-spool"  # under the store: journals of calls made while the server was down


def tracking_uri(configured: str | None, root: Path) -> str:
    if configured:  # credentials: ${env:...} placeholders, or MLflow's MLFLOW_TRACKING_USERNAME / _PASSWORD
        uri = resolve(configured, "mlflow.tracking_uri")
        if redact_text(uri) != uri:  # MLflow's own "View run at <uri>" lines would print the password
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        return uri
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


@contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise creating a SQLite MLflow store (its schema migrations) and the experiment across processes:
    two runs starting at once on a fresh store otherwise race in alembic and one fails."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    with open(uri[len("sqlite:///") :] + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Tracker:
    """The real MLflow implementation (tests may pass a fake with the same methods)."""

    def __init__(self, uri: str, experiment: str, artifact_root: Path | None = None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        self.mlflow, self.uri, self.artifact_root = mlflow, uri, artifact_root
        mlflow.set_tracking_uri(uri)
        with _store_lock(uri):
            self.client = MlflowClient(uri)
            self.client.search_experiments(max_results=1)  # creates and migrates the store under the lock
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                location = Path(artifact_root).resolve().as_uri() if artifact_root else None
                exp_id = self.client.create_experiment(experiment, artifact_location=location)
            else:
                exp_id = exp.experiment_id
        self.experiment_id = exp_id

    def start_run(self, name: str, tags: dict[str, str], start_time_ms: int | None = None) -> str:
        return self.client.create_run(
            self.experiment_id, start_time=start_time_ms, run_name=name, tags=tags
        ).info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100])

    def log_metrics(
        self, run_id: str, metrics: dict[str, float], step: int | None = None, timestamp_ms: int | None = None
    ) -> None:
        import math
        import time

        from mlflow.entities import Metric

        now = timestamp_ms or int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step or 0)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        ]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i : i + 500])

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(run_id, k, str(v))

    def log_input(self, run_id: str, name: str, source: str, digest: str, context: str = "raw") -> None:
        """The run's input data as an MLflow dataset (the run's Datasets): ``source`` a directory, ``digest``
        the fingerprint of its bytes."""
        import warnings

        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        with warnings.catch_warnings():  # the registry's "interpreted in multiple ways" for a local path
            warnings.simplefilter("ignore")
            dataset = MetaDataset(resolve_dataset_source(source), name=name, digest=digest[:36])
        tags = [InputTag(key="mlflow.data.context", value=context)]
        self.client.log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def log_artifacts(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(run_id, str(path), artifact_path)

    def log_served_model(
        self,
        run_id: str,
        path: Path,
        model,
        example,
        registered_name: str | None,
        weights: str | None = None,
        metrics: dict[str, float] | None = None,
        what: str = "model",
    ) -> str | None:
        """Log a ``pyfunc`` model (``model``, a ``PythonModel``) whose one artifact ``served`` is the directory
        ``path``, with the signature of ``example`` and its output; register it when a name is given."""
        import mlflow.pyfunc
        from mlflow.models import infer_signature

        class Context:
            artifacts = {"served": str(path)}

        probe = type(model)()  # a fresh instance: ``model`` is logged as given, without what loading adds
        probe.load_context(Context())
        signature = infer_signature(example, probe.predict(Context(), example))
        with self.mlflow.start_run(run_id=run_id):
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=model,
                artifacts={"served": str(path)},
                signature=signature,
                pip_requirements=_requirements("mlflow", "numpy", "torch", "xgboost"),
            )
        return self._logged(run_id, info, registered_name, weights, metrics, what)

    def _logged(self, run_id, info, registered_name, weights, metrics, what: str) -> str | None:
        """The held-out evaluation on the logged model (not the run's first epoch); the registry version."""
        held_out = {k: float(v) for k, v in (metrics or {}).items() if v == v}  # nan dropped
        if held_out:
            self.mlflow.log_metrics(held_out, run_id=run_id, model_id=info.model_id)
        if not registered_name:
            return None
        return self.register(info.model_uri, registered_name, run_id, weights, metrics or {}, what)

    def register(
        self, model_uri: str, name: str, run_id: str, weights: str | None, metrics: dict[str, float], what: str
    ) -> str:
        """One registry version per distinct weights (a rerun over cached training registers nothing new); the
        ``champion`` alias moves to a new version only when it beats the current one on held-out PR-AUC."""
        from mlflow.exceptions import MlflowException

        if weights:
            for v in self.client.search_model_versions(f"name = '{name}'"):
                if v.tags.get("weights_sha256") == weights:
                    return str(v.version)
        pr_auc = float(metrics.get("pr_auc", float("nan")))
        tags = {"weights_sha256": weights or "", "pr_auc": str(pr_auc), "serves": what}
        mv = self.mlflow.register_model(model_uri, name, tags=tags)
        self.client.update_model_version(
            name,
            mv.version,
            description=f"Fault prediction ({what}) from MLflow run {run_id}: held-out PR-AUC {pr_auc:.4f} "
            f"(tree baseline {float(metrics.get('baseline_pr_auc', float('nan'))):.4f}).",
        )
        try:
            champion = self.client.get_model_version_by_alias(name, "champion")
            best = float(champion.tags.get("pr_auc", "nan"))
        except MlflowException:
            best = float("nan")
        if not best >= pr_auc:  # no champion yet (nan), or the new model is better
            self.client.set_registered_model_alias(name, "champion", mv.version)
        return str(mv.version)

    def end_run(self, run_id: str, status: str = "FINISHED", end_time_ms: int | None = None) -> None:
        self.client.set_terminated(run_id, status, end_time=end_time_ms)

    def reopen_run(self, run_id: str) -> None:
        """Undo a wrong ``KILLED``: the run is alive after all (it ends with its real status later)."""
        self.client.update_run(run_id, status="RUNNING")


def numeric_leaves(data: dict[str, Any], skip: tuple[str, ...] = ("hardware", "runs", "points")) -> dict[str, float]:
    """``{"a": {"b": 1.5}, "c": "x"}`` -> ``{"a.b": 1.5}``: a report's numbers as MLflow metric names."""
    out: dict[str, float] = {}
    for key, value in data.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in numeric_leaves(value, skip).items()})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(key)] = value
    return out


def _requirements(*modules: str) -> list[str]:
    """``distribution==version`` of the installed distribution of each module (xgboost comes as ``xgboost``,
    ``xgboost-cpu`` or ``xgboost-cu13``): what a served model needs, without MLflow's slow inference."""
    from importlib.metadata import packages_distributions, version

    dists = packages_distributions()
    return [f"{d}=={version(d)}" for m in modules for d in dists.get(m, [m])[:1]]
