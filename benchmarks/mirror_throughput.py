"""Mirror throughput: a Paperclip database built from its real DDL
(sandboxes/mirror/paperclip_schema.sql) with N leases, each with its issue,
workspace and run (4 rows per lease, Paperclip's shapes: the run's task in
context_snapshot.issueId, the workspace's in source_issue_id, a termination
receipt and remoteCwd in most leases' metadata), mirrored into an EMPTY
console; then an incremental iteration after 1 % of the leases, runs and
issues changed, and one after nothing changed.

Each figure is printed beside its floor measured in the same run: reading the
same columns of the same rows through one server-side cursor and COPYing them
into a bare table in the console database (no translation, no constraints,
no indexes).

    .venv/bin/python benchmarks/mirror_throughput.py [--leases 100000] [--changed 0.01]

Targets (issue 11): the initial mirror at least 5,000 rows/s; the incremental
iteration proportional to the change, not to the table.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

from _bench_db import ROOT, setup, teardown

CONSOLE_DB = "paperclip_bench_mirror_console"
SOURCE_DB = "paperclip_bench_mirror_source"
BASE = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")

GENERATE = """
INSERT INTO companies (id, name) VALUES (%(company)s, 'bench');
INSERT INTO agents (id, company_id, name) VALUES (%(agent)s, %(company)s, 'coder');
INSERT INTO environments (id, company_id, name, driver, status, config, updated_at)
VALUES (%(env)s, %(company)s, 'daytona', 'sandbox', 'active',
        '{"provider": "daytona", "reuseLease": true}', now() - interval '40 days');
CREATE TEMP TABLE bench_ids AS
SELECT g, gen_random_uuid() AS issue, gen_random_uuid() AS ws, gen_random_uuid() AS run,
       gen_random_uuid() AS lease, gen_random_uuid()::text AS sandbox,
       now() - interval '1 hour' - random() * interval '30 days' AS at
  FROM generate_series(1, %(n)s) AS g;
INSERT INTO issues (id, company_id, identifier, issue_number, title, status,
                    created_at, updated_at)
SELECT issue, %(company)s, 'PAP-' || g, g, 'Task ' || g,
       (ARRAY['in_progress','done','todo','in_review'])[1 + g %% 4], at, at
  FROM bench_ids;
INSERT INTO execution_workspaces (id, company_id, source_issue_id, mode, strategy_type, name,
                                  status, provider_type, created_at, updated_at)
SELECT ws, %(company)s, issue, 'isolated_workspace', 'git_worktree', 'ws ' || g, 'active',
       'remote_managed', at, at
  FROM bench_ids;
UPDATE issues i SET execution_workspace_id = b.ws FROM bench_ids b WHERE i.id = b.issue;
INSERT INTO heartbeat_runs (id, company_id, agent_id, status, context_snapshot, started_at,
                            finished_at, created_at, updated_at)
SELECT run, %(company)s, %(agent)s,
       (ARRAY['succeeded','failed','succeeded','cancelled'])[1 + g %% 4],
       jsonb_build_object('issueId', issue::text, 'taskKey', 'PAP-' || g),
       at - interval '1 hour', at, at - interval '1 hour', at
  FROM bench_ids;
INSERT INTO environment_leases (id, company_id, environment_id, execution_workspace_id,
       issue_id, heartbeat_run_id, status, lease_policy, provider, provider_lease_id,
       acquired_at, last_used_at, released_at, cleanup_status, metadata, created_at, updated_at)
SELECT lease, %(company)s, %(env)s, ws, issue, run,
       (ARRAY['released','released','released','retained','expired','failed'])[1 + g %% 6],
       'reuse_by_environment', 'daytona', sandbox, at - interval '1 hour', at, at, 'success',
       CASE WHEN g %% 6 IN (3) THEN jsonb_build_object('remoteCwd', '/home/daytona/workspace')
       ELSE jsonb_build_object(
         'remoteCwd', '/home/daytona/workspace',
         'sandboxLeaseAcquisition', jsonb_build_object('outcome', 'created',
                                                      'providerLeaseId', sandbox),
         'remoteExecutionTermination', jsonb_build_object(
           'schema', 'paperclip.remote-termination.v1', 'companyId', %(company)s::text,
           'runId', run::text, 'leaseId', lease::text, 'provider', 'daytona',
           'providerLeaseId', sandbox,
           'state', CASE WHEN g %% 6 = 4 THEN 'destroyed' ELSE 'stopped' END,
           'confirmedAt', to_char(at AT TIME ZONE 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
       END,
       at - interval '1 hour', at
  FROM bench_ids;
ANALYZE;
"""

# 1 in `every` leases, runs and issues change, as Paperclip's services write them.
CHANGE = """
UPDATE environment_leases SET status = 'expired', cleanup_status = 'success',
       updated_at = clock_timestamp()
 WHERE id IN (SELECT lease FROM bench_ids WHERE g %% %(every)s = 0);
UPDATE heartbeat_runs SET status = 'succeeded', updated_at = clock_timestamp()
 WHERE id IN (SELECT run FROM bench_ids WHERE g %% %(every)s = 0);
UPDATE issues SET status = 'done', updated_at = clock_timestamp()
 WHERE id IN (SELECT issue FROM bench_ids WHERE g %% %(every)s = 0);
"""


def build_source(n: int):
    import uuid

    import psycopg

    with psycopg.connect(f"{BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SOURCE_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{SOURCE_DB}"')
    dsn = f"{BASE}/{SOURCE_DB}"
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute((ROOT / "sandboxes/mirror/paperclip_schema.sql").read_text())
    ids = {"company": uuid.uuid4(), "agent": uuid.uuid4(), "env": uuid.uuid4(), "n": n}
    with conn.transaction():
        for statement in filter(str.strip, GENERATE.split(";\n")):
            conn.execute(statement, ids if "%(" in statement else None)
    return dsn, conn  # keep the session: bench_ids is a temp table


def floor_seconds(dsn: str) -> tuple[int, float]:
    """Read what the mirror reads (same columns, one server-side cursor per
    table) and COPY it into bare tables in the console database."""
    import psycopg
    from django.db import connection

    from sandboxes.mirror import source
    from sandboxes.mirror.sync import TABLES

    started = time.monotonic()
    rows = 0
    src = psycopg.connect(dsn)
    schema = source.columns_by_table(src, [t.name for t in TABLES])
    connection.ensure_connection()
    raw = connection.connection  # the psycopg connection behind Django's
    with src.transaction(), raw.cursor() as dst:
        for t in TABLES:
            if t.name not in schema:
                continue
            cols = [c for c in (*t.required, *t.optional) if c in schema[t.name]]
            dst.execute(f"DROP TABLE IF EXISTS floor_{t.name}")
            dst.execute(
                f"CREATE UNLOGGED TABLE floor_{t.name} ({', '.join(f'{c} text' for c in cols)})"
            )
            with (
                src.cursor(name=f"floor_{t.name}") as cur,
                dst.copy(f"COPY floor_{t.name} FROM STDIN") as copy,
            ):
                cur.itersize = 5000
                # Quoted: Paperclip's better-auth table is "user", a reserved word
                # (unquoted, FROM user reads the current_user function).
                cur.execute(f'SELECT {", ".join(cols)} FROM "{t.name}" ORDER BY updated_at, {t.pk}')
                for row in cur:
                    copy.write_row([None if v is None else str(v) for v in row])
                    rows += 1
            dst.execute(f"DROP TABLE floor_{t.name}")
    src.close()
    return rows, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction changed (0.01)")
    parser.add_argument("--batch", type=int, default=None, help="rows per page (MIRROR_BATCH_SIZE)")
    args = parser.parse_args()
    every = max(1, round(1 / args.changed))

    os.environ["MIRROR_CURSOR_FILE"] = str(Path(tempfile.mkdtemp()) / "cursors.json")
    os.environ["MIRROR_OVERLAP_SECONDS"] = "0"
    setup(CONSOLE_DB)
    from sandboxes import models as m
    from sandboxes.mirror.sync import mirror_once

    t0 = time.monotonic()
    dsn, src = build_source(args.leases)
    print(
        f"source: {args.leases:,} leases with their issues, workspaces and runs "
        f"(Paperclip's DDL) built in {time.monotonic() - t0:.1f}s; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    try:
        floor_rows, floor_s = floor_seconds(dsn)
        initial = mirror_once(dsn, batch_size=args.batch)
        assert m.EnvironmentLease.objects.count() == args.leases, initial.summary()
        print(
            f"initial mirror: {initial.rows_read:,} rows in {initial.seconds:.1f}s = "
            f"{initial.rows_read / initial.seconds:,.0f} rows/s "
            f"(floor, SELECT + COPY of the same columns: {floor_rows:,} rows in {floor_s:.1f}s = "
            f"{floor_rows / floor_s:,.0f} rows/s; target >= 5,000 rows/s)"
        )
        print(f"  {initial.summary()}")

        idle = mirror_once(dsn, batch_size=args.batch)
        for statement in filter(str.strip, CHANGE.split(";\n")):
            src.execute(statement, {"every": every})
        changed = mirror_once(dsn, batch_size=args.batch)
        assert m.EnvironmentLease.objects.filter(status="expired").count() >= args.leases // every
        share = changed.rows_read / max(initial.rows_read, 1)
        print(f"incremental, nothing changed: {idle.rows_read:,} rows read in {idle.seconds:.2f}s")
        print(
            f"incremental, {args.changed:.0%} changed: {changed.rows_read:,} rows read "
            f"({share:.1%} of the initial) in {changed.seconds:.2f}s "
            f"= {changed.seconds / initial.seconds:.1%} of the initial iteration's time"
        )
        print(f"  {changed.summary()}")
    finally:
        src.close()
        teardown(CONSOLE_DB)
        import psycopg

        with psycopg.connect(f"{BASE}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{SOURCE_DB}" WITH (FORCE)')


if __name__ == "__main__":
    main()
