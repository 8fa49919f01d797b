"""500 stop calls against the simulator at 50 ms latency: concurrency cap 8 vs sequential.

Each stop is a POST and a confirming read, so one stop costs two round trips.
Target: the capped run is at least 6x faster.
Run: .venv/bin/python benchmarks/providers_stop_concurrency.py
"""

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.simulator import SimulatorProcess
from sandboxes.providers.base import SandboxState
from sandboxes.providers.daytona import DaytonaProvider


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--workers", type=int, default=32, help="threads; the cap bounds calls")
    args = parser.parse_args()

    with SimulatorProcess("--transition-seconds", "0") as sim:
        client = DaytonaProvider(
            sim.url, budget_seconds=90, max_concurrency=args.cap, poll_interval=0.05
        )
        ids = [client.create(f"bench-{i}", {"bench": "stop"}).id for i in range(args.calls)]

        def restart_all():
            sim.control.faults(latency=0.0)
            for sid in ids:
                sim.control.sandbox(sid, state="started")
            sim.control.reset()
            sim.control.faults(latency=args.latency)

        def check(confirmations):
            assert all(c.state == SandboxState.STOPPED for c in confirmations)
            calls = sim.control.calls(operation="stop")
            assert len(calls) == args.calls, len(calls)

        restart_all()
        started = time.perf_counter()
        check([client.stop(sid) for sid in ids])
        sequential = time.perf_counter() - started
        print(f"sequential: {args.calls} stops in {sequential:.2f} s")

        restart_all()
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            check(list(pool.map(client.stop, ids)))
        capped = time.perf_counter() - started
        print(
            f"concurrent (cap {args.cap}, {args.workers} threads): "
            f"{args.calls} stops in {capped:.2f} s"
        )
        ratio = sequential / capped
        print(f"RATIO: {ratio:.2f}x faster (target >= 6x) -> {'OK' if ratio >= 6 else 'UNDER'}")
        client.close()
    return 0 if ratio >= 6 else 1


if __name__ == "__main__":
    sys.exit(main())
