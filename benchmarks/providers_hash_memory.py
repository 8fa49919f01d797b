"""Hash 2,000 files (200 MiB) through the simulator and print the client's peak RSS.

The simulator runs in a child process so only the client's memory is measured.
Two paths: remote hashing (process/execute + sha256sum) and the fallback for
sandboxes without sha256sum, which streams every byte through this process.
Target: peak RSS under 150 MiB. Run: .venv/bin/python benchmarks/providers_hash_memory.py
"""

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.simulator import SimulatorProcess
from sandboxes.providers.daytona import DaytonaProvider

MIB = 1024 * 1024


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--total-mib", type=int, default=200)
    args = parser.parse_args()
    size = args.total_mib * MIB // args.files

    with SimulatorProcess("--transition-seconds", "0") as sim:
        client = DaytonaProvider(sim.url, budget_seconds=600, max_concurrency=8, poll_interval=0.05)
        box = client.create("bench-hash", {"bench": "hash"})
        sim.control.generate(box.id, count=args.files, size=size, root="workspace", seed=1)
        client.stop(box.id)  # hashing must start it first, as in salvage
        print(f"files: {args.files}, {args.files * size / MIB:.1f} MiB in the sandbox")
        print(f"client peak RSS before hashing: {peak_rss_mib():.1f} MiB")

        started = time.perf_counter()
        remote = client.hash_files(box.id, "workspace")
        elapsed = time.perf_counter() - started
        print(
            f"remote hash (process/execute): {len(remote)} files in {elapsed:.2f} s, "
            f"client peak RSS {peak_rss_mib():.1f} MiB"
        )

        sim.control.sandbox(box.id, no_sha256sum=True)
        client.stop(box.id)
        started = time.perf_counter()
        streamed = client.hash_files(box.id, "workspace")
        elapsed = time.perf_counter() - started
        total = sum(d.size for d in streamed.values())
        print(
            f"streamed hash (bulk-download, no sha256sum): {len(streamed)} files, "
            f"{total / MIB:.1f} MiB in {elapsed:.2f} s ({total / MIB / elapsed:.0f} MiB/s), "
            f"client peak RSS {peak_rss_mib():.1f} MiB"
        )
        if streamed != remote:
            print("MISMATCH between remote and streamed manifests")
            return 1
        print("manifests agree")
        peak = peak_rss_mib()
        verdict = "OK" if peak < 150 else "OVER"
        print(f"PEAK RSS (client): {peak:.1f} MiB (target < 150 MiB) -> {verdict}")
        client.close()
    return 0 if peak < 150 else 1


if __name__ == "__main__":
    sys.exit(main())
