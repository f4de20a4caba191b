"""The stack's PostgreSQL (deployments/postgres.py): made once under its home, listening on 127.0.0.1 and a socket
in that home, admitting only the stack's own OS user over the socket, and gone when stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import psutil
import pytest

from deployments.postgres import Postgres

pytestmark = [pytest.mark.engine]


async def _select_one(url: str) -> int:
    """Through SQLAlchemy's asyncpg dialect, as Prefect's server connects."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text("select 1"))).scalar_one()
    finally:
        await engine.dispose()


async def _tcp_login(port: int, user: str) -> str:
    import asyncpg

    try:
        await asyncpg.connect(host="127.0.0.1", port=port, user=user, database="postgres", timeout=10)
    except asyncpg.exceptions.InvalidAuthorizationSpecificationError as e:
        return str(e)
    return "admitted"


def test_a_cluster_under_its_home_admits_its_own_user_over_the_socket_only(tmp_path):
    pg = Postgres(tmp_path / "home")
    pg.init()
    made = (pg.data / "PG_VERSION").stat().st_mtime_ns
    pg.init()  # a second start reuses the cluster
    assert (pg.data / "PG_VERSION").stat().st_mtime_ns == made and not (tmp_path / "home" / "pgdata.partial").exists()
    log = open(tmp_path / "postgres.log", "wb")
    proc = subprocess.Popen(pg.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        pg.wait_ready()
        assert asyncio.run(_select_one(pg.url)) == 1
        assert "pg_hba.conf rejects connection" in asyncio.run(_tcp_login(pg.port, pg.user))
        listening = [c.laddr for c in psutil.Process(proc.pid).net_connections("inet") if c.status == "LISTEN"]
        assert listening and {a.ip for a in listening} == {"127.0.0.1"} and {a.port for a in listening} == {pg.port}
        assert oct(pg.socket_dir.stat().st_mode & 0o777) == "0o700"
        assert "password" not in pg.url and pg.url.startswith(f"postgresql+asyncpg://{pg.user}@/postgres?host=")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(pg.data) in " ".join(p.info["cmdline"] or [])]
