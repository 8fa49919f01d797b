"""Policy preview (issue 17) at 100,000 leases on PostgreSQL (a scratch
database), beside its floors measured in the same run: the raw SQL count of
the same candidate predicates (JIT off, as the listing runs it) and the pass's
own listing + holds (`evaluate_fleet`). Prints time, query count and writes.

    .venv/bin/python benchmarks/policy_preview.py [--sizes 10000,100000] [--repeat 5]

Target: under 2 s at 100k leases, with a fixed number of queries and no write.
The fleet is a year of history (devtools/bench_fleet.py), all in one
environment, with one kept sandbox per 10 leases by default (--kept-share).
The preview evaluates the fleet twice (current and proposed policy) on one
listing, so its own floor is about one listing plus the Python of two replays.
"""

import argparse
import os
import time
from datetime import timedelta

from _bench_db import setup, teardown

DB = "paperclip_bench_policy_preview"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--kept-share", type=int, default=10, help="one kept sandbox per N leases")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default=DB)
    args = parser.parse_args()
    setup(args.db)
    import logging

    logging.getLogger("sandboxes").setLevel(logging.WARNING)
    from django.db import connection
    from reconciler_listing import clear, load, raw_counters, timed

    from devtools.bench_fleet import build_fleet
    from sandboxes.models import Environment, EnvironmentLease, Retirement
    from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements
    from sandboxes.reconciler.preview import Policy, preview

    _, raw_count_without_jit = raw_counters()
    print(
        f"{'leases':>8} {'records':>8} {'preview':>9} {'queries':>7} {'writes':>6}"
        f" {'cpu':>7} {'list+holds':>10} {'raw no-JIT':>10} {'vs list':>7} {'vs raw':>7}"
    )
    try:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            clear()
            # A year of history (COPY-loaded), one environment holding every kept
            # sandbox: the preview's worst case is one big environment.
            build_fleet(leases=n, kept=max(n // args.kept_share, 1), environments=1)
            sync_retirements()  # the records a running console has
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            env = Environment.objects.get()
            proposed = Policy("auto", timedelta(hours=2), 10, timedelta(hours=12))
            seconds, queries, writes, pv = timed(
                lambda e=env, p=proposed: preview(e, p), args.repeat
            )
            cpu = time.process_time()
            preview(env, proposed)
            cpu = time.process_time() - cpu  # this process's CPU: less sensitive to load
            list_seconds, _, _, _ = timed(lambda e=env: evaluate_fleet(e.pk), args.repeat)
            raw_seconds, _, _, _ = timed(raw_count_without_jit, args.repeat)
            print(
                f"{EnvironmentLease.objects.count():>8} {Retirement.objects.count():>8}"
                f" {seconds * 1000:>7.0f}ms {queries:>7} {len(writes):>6} {cpu * 1000:>5.0f}ms"
                f" {list_seconds * 1000:>8.0f}ms {raw_seconds * 1000:>8.0f}ms"
                f" {seconds / list_seconds:>6.1f}x {seconds / raw_seconds:>6.1f}x"
                f"  ({load()}, {os.cpu_count()} CPUs)"
            )
            print(f"         current:  {pv.current.counts}")
            print(f"         proposed: {pv.proposed.counts}")
            assert not writes, writes
    finally:
        teardown(args.db)


if __name__ == "__main__":
    main()
