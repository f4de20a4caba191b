"""A local stack: the Prefect server on PostgreSQL (deployments/postgres.py), work pools, every deployment in
prefect.yaml and a worker, plus an MLflow tracking server over the store's own SQLite database and a file server
for the store (GX Data Docs), all on 127.0.0.1. The worker's runs log to that MLflow server, and their links
(run-links artifact, MLflow tags) are http links into these servers.

``python -m deployments.stack up`` (what ``make ui`` runs) starts it and prints the URLs; Ctrl-C stops it.
The browser tests start the same stack with ``Stack(...).start()``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from deployments.automations import HEARTBEAT_S
from deployments.postgres import Postgres
from tasks.core.ports import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
POOLS = ("faultline-cpu", "faultline-gpu")


class Stack:
    def __init__(
        self,
        home: Path,
        port: int | None = None,
        store: Path | None = None,
        log_dir: Path | None = None,
        fast_schedules: bool = False,
        database: str = "postgres",
    ) -> None:
        self.home = Path(home).resolve()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/api"
        self.store = Path(store).resolve() if store else None
        self.root = self.store or REPO / ".faultline"  # the profiles' paths.root when no store is given
        self.mlflow_url = f"http://127.0.0.1:{free_port()}"
        self.files_url = f"http://127.0.0.1:{free_port()}"
        self.log_dir = Path(log_dir or self.home / "logs")
        self.fast = fast_schedules
        self.procs: list[subprocess.Popen] = []
        self.worker: subprocess.Popen | None = None
        self.automations = ""
        # PostgreSQL: writes from many runs at once wait for their locks; SQLite answers some of them 503
        self.postgres = Postgres(self.home) if database == "postgres" else None

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            # a database error Prefect answers with 503 ("retry me") is named in the server log
            "PREFECT_SERVER_LOG_RETRYABLE_ERRORS": "true",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(self.port),
            "PREFECT_UI_API_URL": self.api,
            # flow runs the worker starts beat every 30 s: the zombie-run automation (deployments/automations.py)
            # marks one Crashed after 90 s of silence (its worker and process killed, its machine gone)
            "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S),
            "FAULTLINE_HOME": str(REPO),
            "FAULTLINE_MLFLOW_URI": self.mlflow_url,
            "FAULTLINE_FILES_URL": self.files_url,
            "FAULTLINE_FILES_DIR": str(self.root),
            "PYTHONPATH": str(REPO),
        }
        if self.store:
            env["FAULTLINE_ROOT"] = str(self.store)
        if self.postgres:
            env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = self.postgres.url
        if self.fast:  # tests: the scheduler and the worker look every few seconds instead of every minute
            env.update(
                PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="5",
                PREFECT_WORKER_QUERY_SECONDS="2",
                PREFECT_WORKER_PREFETCH_SECONDS="5",
            )
        return env

    def _prefect(self, *args: str, timeout: int = 300) -> str:
        return self._python("-m", "prefect", *args, timeout=timeout)

    def _spawn(self, name: str, *args: str, module: str = "prefect", argv: list[str] | None = None) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(
            argv or [sys.executable, "-m", module, *args],
            env=self.env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def wait_healthy(self, url: str | None = None, timeout: float = 120) -> None:
        url = url or f"{self.api}/health"
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"{url} not healthy after {timeout} s (see {self.log_dir})")

    def _start_mlflow_and_files(self) -> None:
        """MLflow's server over the same SQLite store and artifact directory the CLI's runs use (so both show),
        and a static file server for the store (Data Docs open over http, not file://)."""
        self.root.mkdir(parents=True, exist_ok=True)
        port = self.mlflow_url.rsplit(":", 1)[1]
        self._spawn(
            "mlflow",
            "server",
            *("--host", "127.0.0.1", "--port", port, "--workers", "1", "--no-serve-artifacts"),
            *("--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}"),
            *("--default-artifact-root", (self.root / "mlartifacts").as_uri()),
            module="mlflow",
        )
        port = self.files_url.rsplit(":", 1)[1]
        self._spawn("files", port, "--bind", "127.0.0.1", "--directory", str(self.root), module="http.server")
        self.wait_healthy(f"{self.mlflow_url}/health", timeout=300)  # its first start migrates the database
        self.wait_healthy(f"{self.files_url}/")

    def start(self, deploy: bool = True, worker: bool = True) -> Stack:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.postgres:
            self.postgres.init()
            self._spawn("postgres", argv=self.postgres.argv())
            self.postgres.wait_ready()
        self._spawn("server", "server", "start", "--host", "127.0.0.1", "--port", str(self.port))
        self._start_mlflow_and_files()
        self.wait_healthy()
        for pool in POOLS:
            self._prefect("work-pool", "create", pool, "--type", "process", "--overwrite")
        if deploy:
            self._prefect("--no-prompt", "deploy", "--all", timeout=600)
            self.automations = self._python("-m", "deployments.automations").strip()
        if worker:
            self.start_worker()
        return self

    def start_worker(self) -> subprocess.Popen:
        """A process worker on the CPU pool (its flow runs start in their own process groups)."""
        self.worker = self._spawn("worker", "worker", "start", "--pool", "faultline-cpu", "--type", "process")
        return self.worker

    def _python(self, *args: str, timeout: int = 120) -> str:
        p = subprocess.run(
            [sys.executable, *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
        if p.returncode != 0:
            raise RuntimeError(
                f"python {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )
        return p.stdout

    def prefect(self, *args: str, timeout: int = 300) -> str:
        return self._prefect(*args, timeout=timeout)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()


def _stop_like_ctrl_c(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deployments.stack")
    p.add_argument("command", choices=["up"])
    p.add_argument("--port", type=int, default=4200)
    p.add_argument("--home", default=str(REPO / ".faultline" / "prefect"))
    p.add_argument("--database", choices=["postgres", "sqlite"], default="postgres", help="Prefect's database")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    stack = Stack(Path(args.home), args.port, database=args.database).start()
    print(f"Prefect UI: {stack.url}  (pools {', '.join(POOLS)}; worker on faultline-cpu; logs {stack.log_dir})")
    if stack.postgres:
        pg = stack.postgres
        print(f"Prefect DB: PostgreSQL, data {pg.data}, 127.0.0.1:{pg.port} (logins over its socket only)")
    print(f"MLflow UI:  {stack.mlflow_url}  (store {stack.root / 'mlflow.db'})")
    print(f"Data Docs:  {stack.files_url}/store/validate/<fingerprint>/gx/uncommitted/data_docs/local_site/")
    env = stack.home / "ui.env"
    env.write_text(
        f"export PREFECT_API_URL={stack.api}\nexport FAULTLINE_MLFLOW_URI={stack.mlflow_url}\n"
        f"export FAULTLINE_FILES_URL={stack.files_url}\nexport FAULTLINE_FILES_DIR={stack.root}\n"
    )
    print(f"CLI runs land in this UI after `source {env}` (else they use a temporary Prefect API of their own)")
    print(
        "Deployments: fault_prediction_pipeline/{nightly,manual,gpu-manual}, presubmit_checklist/presubmit "
        "(triggered by each completed pipeline run), crashed_pipeline_run/crashed (triggered by each crashed one), "
        "submission_report/report (triggered by each passed checklist), tracking_replay/tracking-replay (every "
        "10 minutes), environment_doctor/doctor, simulate_workload/simulate, benchmark/benchmark. Automation: "
        "zombie runs (no heartbeat for 90 s) are set Crashed. Ctrl-C stops everything.",
        flush=True,
    )
    try:
        while all(proc.poll() is None for proc in stack.procs):
            time.sleep(1)
        print("a component exited; see the logs", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
