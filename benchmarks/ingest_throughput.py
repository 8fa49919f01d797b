"""Ingest throughput on PostgreSQL (a scratch database), each figure beside its
floor measured in the same run:

1. POST /api/v1/events, batches of 1,000 (the API's limit);
2. `manage.py load_events` on a JSON-lines file of the same shape (new ids);
3. the floor: a plain COPY of the very rows those events produced, into empty
   copies of the same tables (with their indexes), as events per second;
4. load_events' peak RSS (a child process) on two file sizes: streaming keeps
   it flat, whatever the file's length.

    .venv/bin/python benchmarks/ingest_throughput.py [--events 50000] [--batch 1000]
        [--rss-events 20000,200000]     # 3,000,000 for issue 16's figure

Targets (issue 16): >= 10,000 events/s through the API and load_events, and
load_events of a 3-million-event file under 300 MiB RSS. The machine's load
average is printed beside each figure.
"""

import argparse
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


def copy_floor() -> tuple[float, int]:
    """Seconds to COPY every row ingest wrote (same tables, same indexes, empty)."""
    from django.db import connection

    total, rows = 0.0, 0
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS floor_{table}")
            cursor.execute(f"CREATE TABLE floor_{table} (LIKE {table} INCLUDING ALL)")
            buffer = io.BytesIO()
            with cursor.copy(f"COPY {table} TO STDOUT") as copy:
                for data in copy:
                    buffer.write(data)
            cursor.execute(f"SELECT count(*) FROM {table}")
            rows += cursor.fetchone()[0]
            started = time.perf_counter()
            with cursor.copy(f"COPY floor_{table} FROM STDIN") as copy:
                copy.write(buffer.getvalue())
            total += time.perf_counter() - started
            cursor.execute(f"DROP TABLE floor_{table}")
    return total, rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--rss-events", default="20000,200000", help="file sizes for load_events' RSS; '' skips"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--db", default=DB, help=f"scratch database (default {DB})")
    args = parser.parse_args()

    setup(args.db)
    try:
        from django.core.management import call_command
        from django.test import Client

        from sandboxes.models import ApiToken, EnvironmentLease

        _, raw = ApiToken.issue("bench", "ingest")
        events = events_for(args.events)
        bodies = [
            json.dumps({"events": events[i : i + args.batch]})
            for i in range(0, len(events), args.batch)
        ]
        del events
        client = Client()
        started = time.perf_counter()
        for body in bodies:
            response = client.post(
                "/api/v1/events",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {raw}",
            )
            assert response.status_code == 200, response.content[:500]
        api = time.perf_counter() - started
        api_rate = args.events / api
        print(
            f"API          {args.events:,} events in {len(bodies)} batches of {args.batch}: "
            f"{api:6.2f} s, {api_rate:8,.0f} events/s  ({load()})"
        )

        started = time.perf_counter()
        for body in bodies[:10]:
            client.post(
                "/api/v1/events",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {raw}",
            )
        replay = time.perf_counter() - started
        replayed = sum(len(json.loads(b)["events"]) for b in bodies[:10])
        print(
            f"API replay   {replayed:,} already-seen events: {replayed / replay:8,.0f} events/s "
            f"(validation and the duplicate check only)  ({load()})"
        )
        del bodies

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "events.jsonl")
            write_jsonl(path, args.events)
            started = time.perf_counter()
            call_command(
                "load_events",
                path,
                batch_size=args.batch,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
            loaded = time.perf_counter() - started
            print(
                f"load_events  {args.events:,} events from a file: {loaded:6.2f} s, "
                f"{args.events / loaded:8,.0f} events/s  ({load()})"
            )

        floor, rows = copy_floor()
        events_done = 2 * args.events
        print(
            f"COPY floor   the {rows:,} rows those {events_done:,} events wrote: {floor:6.2f} s, "
            f"{events_done / floor:8,.0f} events/s  (API {events_done / floor / api_rate:.1f}x "
            f"slower, load_events {events_done / floor / (args.events / loaded):.1f}x)  ({load()})"
        )
        print(f"             {EnvironmentLease.objects.count():,} leases in the database")

        from django.db import connection

        db_url = f"{os.environ.get('BENCH_PG', 'postgres://postgres@127.0.0.1:5432')}/{args.db}"
        connection.close()
        for count in [int(s) for s in args.rss_events.split(",") if s]:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "events.jsonl")
                write_jsonl(path, count)
                size = os.path.getsize(path) / 2**20
                seconds, rss, progress = load_events_child(path, db_url)
                print(
                    f"load_events  {count:,} events ({size:,.0f} MiB file) in a child process: "
                    f"{seconds:6.1f} s, {count / seconds:8,.0f} events/s, peak RSS {rss:,.0f} MiB"
                    f"  ({load()})"
                )
                if progress:
                    print(f"             stderr: {progress}")
    finally:
        if not args.keep:
            teardown(args.db)


if __name__ == "__main__":
    main()
