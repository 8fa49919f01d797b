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
no indexes). Beside it, what the console's own tables cost: the rows the
mirror wrote, COPYed into the same tables of an empty console (every index,
foreign key and trigger intact, in one transaction): the least any mirror
writing those rows can cost, whatever its reading and translating.

    .venv/bin/python benchmarks/mirror_throughput.py [--leases 100000] [--changed 0.01]
        [--console-db NAME --source-db NAME]   # scratch databases, dropped first and after
        [--follow-samples 5] [--interval 10]  # follow latency, a child at MIRROR_INTERVAL_SECONDS
        [--rss]                               # a full mirror's peak RSS, in a child
        [--rss-only]                          # that alone (1,000,000 leases: ~20 min)
        [--profile out.prof]                  # cProfile of the initial mirror

Targets: the initial mirror within 2x its floor's time at 100,000 leases; the
incremental iteration proportional to the change, not to the table, and under
100 ms when nothing changed (also printed: after a write to another table,
when every table is scanned, Paperclip having no index on updated_at);
following, a committed change in the console within 2 x
MIRROR_INTERVAL_SECONDS; a full mirror of 1,000,000 leases under 250 MiB
peak RSS.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _bench_db import (
    BASE,
    MAXRSS_FORMAT,
    ROOT,
    create_database,
    drop_database,
    peak_rss_mib,
    setup,
    teardown,
)

CONSOLE_DB = "paperclip_bench_mirror_console"
SOURCE_DB = "paperclip_bench_mirror_source"

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


def build_source(n: int, name: str):
    import uuid

    import psycopg

    create_database(name)
    dsn = f"{BASE}/{name}"
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


def empty_console(console_db: str) -> str:
    """A copy of the freshly migrated console (`<console-db>_empty`), for
    `constrained_floor`: CREATE DATABASE … TEMPLATE, with no session on the
    template."""
    from django.db import connections

    connections.close_all()
    name = f"{console_db}_empty"
    create_database(name, template=console_db)
    return name


def constrained_floor(empty_db: str) -> tuple[int, float]:
    """(rows, seconds) to COPY every console row the mirror wrote into the same
    tables of the empty console `empty_db`, in one transaction: binary COPY out
    of the mirrored console relayed block by block into COPY in, with every
    index, (deferred) foreign key and statement trigger of the real tables, and
    the commit that checks the foreign keys."""
    import psycopg
    from django.db import connection

    connection.ensure_connection()
    here = connection.connection
    with psycopg.connect(f"{BASE}/{empty_db}") as there:
        tables = [
            name
            for (name,) in here.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'sandboxes_%'"
                " AND relnamespace = 'public'::regnamespace ORDER BY relname"
            )
        ]
        filled = {}
        for table in tables:
            rows = here.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            before = there.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if rows and not before:  # rows the migrations seed are there already
                filled[table] = rows
        there.commit()
        there.execute("CHECKPOINT")
        started = time.monotonic()
        with here.cursor() as out_cur, there.cursor() as in_cur:
            for table in filled:
                with (
                    out_cur.copy(f"COPY {table} TO STDOUT (FORMAT BINARY)") as out,
                    in_cur.copy(f"COPY {table} FROM STDIN (FORMAT BINARY)") as into,
                ):
                    for block in out:
                        into.write(block)
        there.commit()  # the deferred foreign keys are checked here
        seconds = time.monotonic() - started
    return sum(filled.values()), seconds


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f}"


def initial_mirror(dsn: str, args) -> None:
    from sandboxes import models as m
    from sandboxes.mirror.sync import mirror_once

    floor_rows, floor_s = floor_seconds(dsn)
    floor_rate = floor_rows / floor_s
    empty_db = empty_console(args.console_db)
    try:
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            initial = profiler.runcall(mirror_once, dsn, batch_size=args.batch)
            profiler.dump_stats(args.profile)
        else:
            initial = mirror_once(dsn, batch_size=args.batch)
        assert m.EnvironmentLease.objects.count() == args.leases, initial.summary()
        rate = initial.rows_read / initial.seconds
        print(
            f"initial mirror: {initial.rows_read:,} rows in {initial.seconds:.1f}s = "
            f"{rate:,.0f} rows/s (floor, SELECT + COPY of the same columns: {floor_rows:,} rows"
            f" in {floor_s:.1f}s = {floor_rate:,.0f} rows/s): {floor_rate / rate:.1f}x the"
            f" floor's time (target <= 2x); {load()}"
        )
        print(f"  {initial.summary()}")
        rows, seconds = constrained_floor(empty_db)
    finally:
        drop_database(empty_db)
    print(
        f"  the console's own tables: COPY of the {rows:,} rows the mirror wrote into an empty"
        f" console (indexes, foreign keys, triggers) in {seconds:.1f}s = {seconds / floor_s:.1f}x"
        f" the floor's time; the mirror took {initial.seconds / seconds:.1f}x that; {load()}"
    )


def incremental(dsn: str, src, args) -> None:
    from django.conf import settings

    from sandboxes import models as m
    from sandboxes.mirror.sync import mirror_once

    every = max(1, round(1 / args.changed))
    mirror_once(dsn, batch_size=args.batch)  # the first pass after a full one re-reads its edge
    idle = min((mirror_once(dsn, batch_size=args.batch) for _ in range(5)), key=lambda r: r.seconds)
    src.execute("CREATE TEMP TABLE activity (n int)")
    busy = min((elsewhere(src, dsn, args) for _ in range(5)), key=lambda r: r.seconds)
    for statement in filter(str.strip, CHANGE.split(";\n")):
        src.execute(statement, {"every": every})
    changed = mirror_once(dsn, batch_size=args.batch)
    assert m.EnvironmentLease.objects.filter(status="expired").count() >= args.leases // every
    print(
        f"incremental, nothing changed: {idle.rows_read:,} rows read in "
        f"{idle.seconds * 1000:.0f} ms, best of 5 (target <= 100 ms)"
        f"{': the snapshot was the last one' if idle.source_unchanged else ''}; {load()}"
    )
    print(
        f"incremental, nothing mirrored changed, another table written: {busy.rows_read:,} rows"
        f" read ({busy.unchanged:,} again unchanged, {busy.rows_mirrored} written) in"
        f" {busy.seconds * 1000:.0f} ms, best of 5: every table scanned; {load()}"
    )
    assert settings.MIRROR_OVERLAP_SECONDS == 0
    initial_rows = sum(src.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in SOURCES)
    print(
        f"incremental, {args.changed:.0%} changed: {changed.rows_read:,} rows read "
        f"({changed.rows_read / initial_rows:.1%} of the source) in {changed.seconds:.2f}s; "
        f"{load()}"
    )
    print(f"  {changed.summary()}")


def elsewhere(src, dsn: str, args):
    """An iteration after Paperclip wrote a table the mirror does not read."""
    from sandboxes.mirror.sync import mirror_once

    src.execute("INSERT INTO activity VALUES (1)")
    return mirror_once(dsn, batch_size=args.batch)


# The tables the benchmark fills (the others hold a row or none).
SOURCES = ("issues", "execution_workspaces", "heartbeat_runs", "environment_leases")


def child_env(console_db: str) -> dict:
    """A child's settings: the test settings' keys and hosts, DEBUG off as in
    production. With DEBUG on, Django keeps the text of the last 9,000
    statements each connection ran: a lease page's lock query names 5,000 ids
    (185 KB), and a full mirror of 1,000,000 leases peaked at 258 MiB for its
    processes together against 220 MiB with DEBUG off (161 against 141 MiB in
    the largest)."""
    return {
        **os.environ,
        "DATABASE_URL": f"{BASE}/{console_db}",
        "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings",
        "DEBUG": "0",
    }


def follow_latency(dsn: str, src, args) -> None:
    """`manage.py mirror_paperclip --follow` in a child process at
    MIRROR_INTERVAL_SECONDS: commit a change in Paperclip, time until the
    console's row shows it. Changes land at random points of the interval."""
    import random
    import subprocess

    from django.conf import settings

    from sandboxes import models as m

    interval = args.interval or settings.MIRROR_INTERVAL_SECONDS
    command = [sys.executable, str(ROOT / "manage.py"), "mirror_paperclip", "--dsn", dsn]
    command += ["--follow", "--interval", str(interval)]
    child = subprocess.Popen(
        command, env=child_env(args.console_db), stdout=subprocess.PIPE, text=True
    )
    latencies = []
    try:
        assert child.stdout is not None
        child.stdout.readline()  # its first iteration is over: it is following
        for i in range(args.follow_samples):
            time.sleep(random.uniform(0, interval))
            lease = src.execute("SELECT lease FROM bench_ids WHERE g = %s", [i + 1]).fetchone()[0]
            failure = f"follow probe {i}"
            src.execute(
                "UPDATE environment_leases SET failure_reason = %s, updated_at = clock_timestamp()"
                " WHERE id = %s",
                [failure, lease],
            )  # autocommit: committed here
            committed = time.monotonic()
            row = m.EnvironmentLease.objects.filter(pk=lease, failure_reason=failure)
            while not row.exists():
                if time.monotonic() - committed > 4 * interval + 30:
                    raise SystemExit("the follower never mirrored the change")
                time.sleep(0.01)
            latencies.append(time.monotonic() - committed)
    finally:
        child.terminate()
        child.wait(timeout=30)
    print(
        f"follow, committed change to console row: mean {sum(latencies) / len(latencies):.2f}s,"
        f" max {max(latencies):.2f}s over {len(latencies)} changes at --interval {interval:g}"
        f" (target <= 2 x MIRROR_INTERVAL_SECONDS = {2 * interval:g}s); {load()}"
    )


def tree_pss_mib(root: int) -> float:
    """What `root` and every process under it hold in memory together (MiB): the
    sum of their proportional set sizes (/proc/<pid>/smaps_rollup, Pss: a page
    shared by a fork's parent and child counted half in each)."""
    from pathlib import Path

    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    kib, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                kib += sum(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except OSError:
            pass
    return kib / 1024


def mirror_rss(dsn: str, args) -> None:
    """A full mirror into an empty console (a scratch database of its own,
    `<console-db>_rss`: the console's audit trail refuses TRUNCATE), in a child
    process (manage.py mirror_paperclip --once --full): the peak RSS of its
    largest process, from /usr/bin/time, and the peak of its processes
    together (the mirror forks a second one for the leases), sampled every
    0.1 s (`tree_pss_mib`)."""
    import subprocess

    name = f"{args.console_db}_rss"
    create_database(name)
    manage = [sys.executable, str(ROOT / "manage.py")]
    together = 0.0
    try:
        subprocess.run([*manage, "migrate", "-v0"], env=child_env(name), check=True)
        started = time.monotonic()
        child = subprocess.Popen(
            ["/usr/bin/time", "-f", MAXRSS_FORMAT, *manage]
            + ["mirror_paperclip", "--dsn", dsn, "--once", "--full"],
            env=child_env(name),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        stderr = ""
        while True:
            together = max(together, tree_pss_mib(child.pid))
            try:
                stderr = child.communicate(timeout=0.1)[1]
                break
            except subprocess.TimeoutExpired:
                continue
        seconds = time.monotonic() - started
    finally:
        drop_database(name)
    if child.returncode != 0:
        raise SystemExit(f"mirror_paperclip failed:\n{stderr[-3000:]}")
    rss = peak_rss_mib(stderr)
    print(
        f"mirror_paperclip --once --full in a child, {args.leases:,} leases: {seconds:.1f}s, "
        f"peak RSS of its largest process {rss:,.0f} MiB, of its processes together "
        f"{together:,.0f} MiB (Pss; target < 250 MiB at 1,000,000 leases); {load()}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction changed (0.01)")
    parser.add_argument("--batch", type=int, default=None, help="rows per page (MIRROR_BATCH_SIZE)")
    parser.add_argument("--console-db", default=CONSOLE_DB, help=f"scratch console ({CONSOLE_DB})")
    parser.add_argument("--source-db", default=SOURCE_DB, help=f"scratch Paperclip ({SOURCE_DB})")
    parser.add_argument("--profile", default="", help="write a cProfile of the initial mirror here")
    parser.add_argument("--follow-samples", type=int, default=0, help="follow latency probes (0)")
    parser.add_argument("--interval", type=float, default=0, help="follow interval (setting's)")
    parser.add_argument("--rss", action="store_true", help="a full mirror's peak RSS in a child")
    parser.add_argument(
        "--rss-only",
        action="store_true",
        help="only the child's peak RSS (skips the in-process figures: at 1,000,000 leases they "
        "double the run's length)",
    )
    args = parser.parse_args()

    os.environ["MIRROR_CURSOR_FILE"] = str(Path(tempfile.mkdtemp()) / "cursors.json")
    os.environ["MIRROR_OVERLAP_SECONDS"] = "0"
    setup(args.console_db)
    t0 = time.monotonic()
    dsn, src = build_source(args.leases, args.source_db)
    print(
        f"source: {args.leases:,} leases with their issues, workspaces and runs "
        f"(Paperclip's DDL) built in {time.monotonic() - t0:.1f}s; "
        f"{load()} on {os.cpu_count()} CPUs"
    )
    try:
        if not args.rss_only:
            initial_mirror(dsn, args)
            incremental(dsn, src, args)
            if args.follow_samples:
                follow_latency(dsn, src, args)
        if args.rss or args.rss_only:
            mirror_rss(dsn, args)
    finally:
        src.close()
        teardown(args.console_db)
        drop_database(args.source_db)


if __name__ == "__main__":
    main()
