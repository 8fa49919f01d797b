"""Shared set-up for benchmarks: a scratch PostgreSQL database, migrated."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


BASE = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")


def create_database(name: str, template: str | None = None) -> None:
    """A fresh scratch database `name` (dropped first), empty or a copy of `template`."""
    import psycopg

    with psycopg.connect(f"{BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(f"{BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup(db_name: str) -> None:
    """Point Django at a fresh scratch database `db_name` and migrate it."""
    create_database(db_name)
    os.environ["DATABASE_URL"] = f"{BASE}/{db_name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.test_settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def teardown(db_name: str) -> None:
    from django.db import connections

    connections.close_all()
    drop_database(db_name)


# `/usr/bin/time -f MAXRSS_FORMAT …` writes a child's peak RSS on its stderr.
MAXRSS_FORMAT = "maxrss_kib=%M"


def peak_rss_mib(stderr: str) -> float:
    """The peak RSS (MiB) `/usr/bin/time -f MAXRSS_FORMAT` reported on `stderr`."""
    return next(
        int(line.split("=", 1)[1]) / 1024
        for line in reversed(stderr.splitlines())
        if line.startswith("maxrss_kib=")
    )
