"""Ingest throughput on PostgreSQL (a scratch database), each figure beside its
floor measured in the same run:

1. POST /api/v1/events, batches of 1,000 (the API's limit);
2. `manage.py load_events` on a JSON-lines file of the same shape (new ids);
3. the floor: a plain COPY of the very rows those events produced, into copies
   of the same tables (with their indexes) holding what the database held
   before, as events per second;
4. with `--preload N`: N leases of history (devtools.bench_fleet, ~2.6 rows
   per lease across the tables) are loaded, and 1-3 are measured again, with
   the preloaded rate as a share of the empty one (target: within 20 %);
5. load_events' peak RSS (a child process) on each file size: streaming keeps
   it flat, whatever the file's length.

    .venv/bin/python benchmarks/ingest_throughput.py [--events 50000] [--batch 1000]
        [--preload 1000000] [--rss-events 20000,200000]   # 3000000: the 150 MiB figure
        [--profile PREFIX]   # cProfile of the API and load_events (PREFIX.api.prof, ...)

Targets (docs/architecture.md, "Recorded"): the API and load_events within 2x
of the COPY floor, empty and preloaded; load_events of a 3-million-event file
under 150 MiB RSS. The machine's load average is printed beside each figure.
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time

from _bench_db import MAXRSS_FORMAT, ROOT, peak_rss_mib, setup, teardown

from devtools.events import EPOCH, Events, uid

DB = "paperclip_bench_ingest"
TABLES = (
    "sandboxes_environment",
    "sandboxes_issue",
    "sandboxes_executionworkspace",
    "sandboxes_heartbeatrun",
    "sandboxes_environmentlease",
    "sandboxes_receipt",
    "sandboxes_leaseintent",
    "sandboxes_ingestedevent",
)


def lease_graph(ev: Events, n: int, env: str) -> list[dict]:
    """Seven events per sandbox, in the shapes Paperclip sends."""
    ids = {k: uid() for k in ("issue", "ws", "run", "lease")}
    sandbox = f"sbx-{env[:8]}-{n}"
    files = {f"src/f{i}.py": {"sha256": f"{i:064x}", "size": 100 + i} for i in range(5)}
    return [
        ev.issue(
            ids["issue"],
            "in_progress",
            key=f"PAP-{n}",
            title="Task",
            bound_workspace_id=ids["ws"],
        ),
        ev.workspace(ids["ws"], ids["issue"], saved_at=EPOCH, saved_manifest=files),
        ev.run(ids["run"], ids["issue"], "failed"),
        ev.lease(
            ids["lease"],
            environment_id=env,
            provider="daytona",
            provider_lease_id=sandbox,
            status="active",
            lease_policy="reuse_by_environment",
            acquired_at=EPOCH,
            issue_id=ids["issue"],
            workspace_id=ids["ws"],
            run_id=ids["run"],
        ),
        ev.released(ids["lease"], "keep_running"),
        ev.receipt(ids["lease"], run_id=ids["run"], provider_lease_id=sandbox, confirmed_at=EPOCH),
        ev.intent(uid(), ids["lease"], "stop_and_retain", "confirmed"),
    ]


def events_for(count: int) -> list[dict]:
    # Random ids: every file and batch is new to the console.
    ev = Events(ids=lambda _n, _type: uid())
    env = uid()
    events = [ev.environment(env, f"bench-{env[:8]}", "daytona")]
    n = 0
    while len(events) < count:
        events.extend(lease_graph(ev, n, env))
        n += 1
    return events[:count]


def write_jsonl(path: str, count: int) -> None:
    """Stream `count` events to a file without holding them all."""
    with open(path, "w", encoding="utf-8") as fh:
        written = 0
        while written < count:
            chunk = events_for(min(70_000, count - written))
            fh.write("\n".join(json.dumps(e) for e in chunk) + "\n")
            written += len(chunk)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def xid() -> int:
    """The current transaction id: rows written from here on have an xmin at
    least this (a fresh database: no wraparound)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        return cursor.fetchone()[0]


def checkpoint() -> None:
    """A checkpoint before each timed phase. The first change to a page after a
    checkpoint writes the whole page to the WAL; random uuid keys touch pages
    all over a big table's indexes, so whichever phase ran first after one
    (begun by the preload's writes, spread over minutes) paid for the pages
    the others then found logged. Each phase now starts after its own."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def copy_floor(since: int) -> tuple[float, float, int]:
    """(seconds, seconds with foreign keys, rows) to COPY every row ingest
    wrote since transaction `since` into copies of the same tables (same
    indexes) that already hold every row written before it: the floor of a
    database as full as the one ingest wrote into. Then the same rows again,
    the copies having gained the real tables' foreign keys (deferred, as
    Django declares them, so checked at each COPY's commit), pointing at the
    real tables: what the console's constraints add to the floor."""
    from django.db import connection

    total, keyed, rows = 0.0, 0.0, 0
    written = f"xmin::text::bigint >= {since}"
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS floor_{table}")
            cursor.execute(f"CREATE TABLE floor_{table} (LIKE {table} INCLUDING ALL)")
            cursor.execute(f"INSERT INTO floor_{table} SELECT * FROM {table} WHERE NOT {written}")
            cursor.execute(f"ANALYZE floor_{table}")
            buffer = io.BytesIO()
            with cursor.copy(f"COPY (SELECT * FROM {table} WHERE {written}) TO STDOUT") as copy:
                for data in copy:
                    buffer.write(data)
            cursor.execute(f"SELECT count(*) FROM {table} WHERE {written}")
            rows += cursor.fetchone()[0]
            checkpoint()
            started = time.perf_counter()
            with cursor.copy(f"COPY floor_{table} FROM STDIN") as copy:
                copy.write(buffer.getvalue())
            total += time.perf_counter() - started
            # Again, with the foreign keys: the copied rows out, the keys in
            # (NOT VALID: the rows held before are the real table's, checked).
            cursor.execute(
                f"DELETE FROM floor_{table} WHERE id IN (SELECT id FROM {table} WHERE {written})"
            )
            cursor.execute(f"VACUUM ANALYZE floor_{table}")
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conrelid = %s::regclass AND contype = 'f'",
                [table],
            )
            for (definition,) in cursor.fetchall():
                cursor.execute(f"ALTER TABLE floor_{table} ADD {definition} NOT VALID")
            checkpoint()
            started = time.perf_counter()
            with cursor.copy(f"COPY floor_{table} FROM STDIN") as copy:
                copy.write(buffer.getvalue())
            keyed += time.perf_counter() - started
            cursor.execute(f"DROP TABLE floor_{table}")
    return total, keyed, rows


def load_events_child(path: str, db_url: str) -> tuple[float, float, str]:
    """Run load_events in a child process under /usr/bin/time: seconds, its peak RSS
    (MiB), its last progress line."""
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings",
    }
    started = time.perf_counter()
    done = subprocess.run(
        [
            "/usr/bin/time",
            "-f",
            MAXRSS_FORMAT,
            sys.executable,
            str(ROOT / "manage.py"),
            "load_events",
            path,
            "--source",
            path,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"load_events failed:\n{done.stderr[-3000:]}")
    rss = peak_rss_mib(done.stderr)
    progress = [line for line in done.stderr.splitlines() if line.startswith("…")]
    return seconds, rss, progress[-1] if progress else ""


class DatabaseTime:
    """How long the caller waited on the database while it ran: every
    statement (a Django execute wrapper) and every commit, where the deferred
    foreign keys are checked. The rest of a run's time is Python's. Beside the
    floor, it bounds what a faster client could reach: with Python free, a run
    still costs its database time."""

    def __init__(self) -> None:
        self.statements = 0.0
        self.commits = 0.0
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.statements += time.perf_counter() - started
            self.count += 1

    @contextlib.contextmanager
    def timing(self):
        from django.db import connection

        commit = connection._commit

        def timed_commit():
            started = time.perf_counter()
            try:
                return commit()
            finally:
                self.commits += time.perf_counter() - started

        connection._commit = timed_commit
        try:
            with connection.execute_wrapper(self):
                yield self
        finally:
            del connection._commit  # the class's own again

    def line(self, seconds: float, batches: int, floor_per_batch: float, note: str = "") -> str:
        per = 1000 / batches
        database = self.statements + self.commits
        return (
            f"  per batch: {seconds * per:5.1f} ms = database {database * per:5.1f} ms "
            f"({self.count / batches:.0f} statements {self.statements * per:.1f} ms, "
            f"commits {self.commits * per:.1f} ms) + Python {(seconds - database) * per:5.1f} ms"
            f"{note}; the floor's batch {floor_per_batch * 1000:.1f} ms: the database alone "
            f"is {database / batches / floor_per_batch:.1f}x it, Python alone "
            f"{(seconds - database) / batches / floor_per_batch:.1f}x"
        )


def warm_up(client, token: str) -> None:
    """One request of an empty batch (accepted, no event): a server has loaded its URLconf,
    and the views and schemas it imports, before its first event. Unwarmed, the
    first request's imports were 0.57 s of the API's 2.4 s for 30,000 events
    (cProfile); the COPY floor pays nothing of the kind."""
    response = client.post(
        "/api/v1/events",
        json.dumps({"events": []}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code < 500, response.content[:500]


def post_all(client, bodies: list[str], token: str) -> None:
    for body in bodies:
        response = client.post(
            "/api/v1/events",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 200, response.content[:500]


def profiled(args, name: str, run, *given, **named) -> None:
    """run(*given, **named), under cProfile into PREFIX.NAME.prof with --profile."""
    if not args.profile:
        run(*given, **named)
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(run, *given, **named)
    profiler.dump_stats(f"{args.profile}.{name}.prof")


def measure(args, label: str, token: str) -> tuple[float, float]:
    """The API and load_events rates (events/s) into the database as it is,
    each printed beside the COPY floor of the rows they wrote, into tables
    holding what the database held before."""
    from django.core.management import call_command
    from django.test import Client

    from sandboxes.models import EnvironmentLease

    held = EnvironmentLease.objects.count()
    print(f"\n{label}: {held:,} leases in the database  ({load()})", flush=True)
    since = xid()
    events = events_for(args.events)
    bodies = [
        json.dumps({"events": events[i : i + args.batch]})
        for i in range(0, len(events), args.batch)
    ]
    del events
    client = Client()
    warm_up(client, token)
    checkpoint()
    api_time = DatabaseTime()
    started = time.perf_counter()
    with api_time.timing():
        profiled(args, "api", post_all, client, bodies, token)
    api = time.perf_counter() - started
    batches = len(bodies)
    api_rate = args.events / api
    print(
        f"API          {args.events:,} events in {len(bodies)} batches of {args.batch}: "
        f"{api:6.2f} s, {api_rate:8,.0f} events/s  ({load()})",
        flush=True,
    )

    started = time.perf_counter()
    post_all(client, bodies[:10], token)
    replay = time.perf_counter() - started
    replayed = sum(len(json.loads(b)["events"]) for b in bodies[:10])
    print(
        f"API replay   {replayed:,} already-seen events: {replayed / replay:8,.0f} events/s "
        f"(validation and the duplicate check only)  ({load()})",
        flush=True,
    )
    del bodies

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "events.jsonl")
        write_jsonl(path, args.events)
        checkpoint()
        file_time = DatabaseTime()
        started = time.perf_counter()
        with file_time.timing():
            profiled(
                args,
                "load_events",
                call_command,
                "load_events",
                path,
                batch_size=args.batch,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
        loaded = time.perf_counter() - started
    file_rate = args.events / loaded
    print(
        f"load_events  {args.events:,} events from a file: {loaded:6.2f} s, "
        f"{file_rate:8,.0f} events/s  ({load()})",
        flush=True,
    )

    floor, keyed, rows = copy_floor(since)
    events_done = 2 * args.events
    floor_rate = events_done / floor
    print(
        f"COPY floor   the {rows:,} rows those {events_done:,} events wrote, into tables "
        f"holding the {held:,} leases before: {floor:6.2f} s, {floor_rate:8,.0f} events/s  "
        f"(API {floor_rate / api_rate:.1f}x slower, load_events {floor_rate / file_rate:.1f}x)"
        f"  ({load()})",
        flush=True,
    )
    keyed_rate = events_done / keyed
    print(
        f"  with the foreign keys: {keyed:6.2f} s, {keyed_rate:8,.0f} events/s = "
        f"{keyed / floor:.1f}x the floor's time (API {keyed_rate / api_rate:.1f}x slower, "
        f"load_events {keyed_rate / file_rate:.1f}x)  ({load()})",
        flush=True,
    )
    floor_per_batch = floor / (2 * batches)
    print("API", api_time.line(api, batches, floor_per_batch), flush=True)
    print(
        "load_events",
        file_time.line(
            loaded,
            batches,
            floor_per_batch,
            " (its statements as waited for: the thread validating the next batch can hold"
            " the interpreter when one returns)",
        ),
        flush=True,
    )
    return api_rate, file_rate


def preload(leases: int) -> None:
    """A year of history (devtools.bench_fleet, COPY-loaded) beside what ingest wrote."""
    from django.db import connection

    from devtools.bench_fleet import build_fleet

    started = time.perf_counter()
    stats = build_fleet(leases=leases, kept=max(leases // 200, 1), prefix="preload")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(
        f"\npreloaded {stats.leases:,} leases ({sum(stats.rows.values()):,} rows) in "
        f"{time.perf_counter() - started:.0f} s  ({load()})",
        flush=True,
    )
    prewarm()


def prewarm() -> None:
    """Read the written tables' indexes, then their heaps, into shared_buffers
    (pg_prewarm), as a console running for a while has them; and print whether
    they fit. COPY and VACUUM go through small rings of buffers, so after the
    preload its pages are in the OS's cache but not PostgreSQL's: whichever
    phase ran first read them in (the API's preloaded rate was 0.73-0.78 of
    the empty one beside load_events' 1.00-1.02, with 2 GB of
    shared_buffers). Where they do not fit, the figures measure a working set
    larger than the cache, which is what grows with the table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'"
        )
        buffers = cursor.fetchone()[0]
        cursor.execute(
            "SELECT coalesce(sum(pg_indexes_size(t::regclass)), 0),"
            " coalesce(sum(pg_table_size(t::regclass)), 0) FROM unnest(%s::text[]) AS t",
            [list(TABLES)],
        )
        indexes, heaps = cursor.fetchone()
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        except Exception as exc:  # not a superuser, or no contrib package
            print(f"  not prewarmed ({str(exc).splitlines()[0]})", flush=True)
            return
        cursor.execute(
            "SELECT sum(pg_prewarm(i.indexrelid)) FROM pg_index i"
            " WHERE i.indrelid = ANY(%s::regclass[])",
            [list(TABLES)],
        )
        cursor.execute(
            "SELECT sum(pg_prewarm(t::regclass)) FROM unnest(%s::text[]) AS t", [list(TABLES)]
        )
    fits = "they fit" if indexes + heaps <= buffers else "they do not fit"
    print(
        f"  prewarmed: the tables' indexes {indexes / 2**20:,.0f} MiB and heaps "
        f"{heaps / 2**20:,.0f} MiB, against shared_buffers {buffers / 2**20:,.0f} MiB: {fits}",
        flush=True,
    )


def rss(args) -> None:
    """load_events' peak RSS in a child process, for each file size."""
    from django.db import connection

    db_url = f"{os.environ.get('BENCH_PG', 'postgres://postgres@127.0.0.1:5432')}/{args.db}"
    connection.close()
    for count in [int(s) for s in args.rss_events.split(",") if s]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "events.jsonl")
            write_jsonl(path, count)
            size = os.path.getsize(path) / 2**20
            seconds, peak, progress = load_events_child(path, db_url)
            print(
                f"load_events  {count:,} events ({size:,.0f} MiB file) in a child process: "
                f"{seconds:6.1f} s, {count / seconds:8,.0f} events/s, peak RSS {peak:,.0f} MiB"
                f"  ({load()})",
                flush=True,
            )
            if progress:
                print(f"             stderr: {progress}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--preload",
        type=int,
        default=0,
        help="then load this many leases of history and measure again (1000000: issue 28)",
    )
    parser.add_argument(
        "--rss-events", default="20000,200000", help="file sizes for load_events' RSS; '' skips"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--profile",
        default="",
        help="cProfile the API and load_events into PREFIX.{api,load_events}.prof",
    )
    parser.add_argument("--db", default=DB, help=f"scratch database (default {DB})")
    args = parser.parse_args()

    setup(args.db)
    try:
        from sandboxes.models import ApiToken

        _, token = ApiToken.issue("bench", "ingest")
        empty = measure(args, "empty database", token)
        if args.preload:
            preload(args.preload)
            full = measure(args, "preloaded database", token)
            for name, a, b in (("API", empty[0], full[0]), ("load_events", empty[1], full[1])):
                print(
                    f"{name:<12} preloaded / empty: {b / a:.2f} (target: within 20 %)  ({load()})"
                )
        rss(args)
    finally:
        if not args.keep:
            teardown(args.db)


if __name__ == "__main__":
    main()
