"""Shared set-up for benchmarks: a scratch PostgreSQL database, migrated."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup(db_name: str) -> None:
    """Point Django at a fresh scratch database `db_name` and migrate it."""
    import psycopg

    base = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db_name}"')
    os.environ["DATABASE_URL"] = f"{base}/{db_name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.test_settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def teardown(db_name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    base = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')


# `/usr/bin/time -f MAXRSS_FORMAT …` writes a child's peak RSS on its stderr.
MAXRSS_FORMAT = "maxrss_kib=%M"


def peak_rss_mib(stderr: str) -> float:
    """The peak RSS (MiB) `/usr/bin/time -f MAXRSS_FORMAT` reported on `stderr`."""
    return next(
        int(line.split("=", 1)[1]) / 1024
        for line in reversed(stderr.splitlines())
        if line.startswith("maxrss_kib=")
    )
