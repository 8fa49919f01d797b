"""The mirror benchmark runs end to end on a small fleet (README, Benchmarks):
a benchmark that no longer runs measures nothing. It builds Paperclip's real
DDL, so a table the mirror gains (better-auth's "user", a reserved word in
PostgreSQL) reaches its floor query too."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_mirror_benchmark_runs_and_prints_each_figure_beside_its_floor():
    done = subprocess.run(
        [sys.executable, "benchmarks/mirror_throughput.py", "--leases", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    initial = next(line for line in done.stdout.splitlines() if line.startswith("initial mirror:"))
    assert "1,203 rows" in initial and "floor, SELECT + COPY" in initial
    # The console's own tables, as COPY: the 1,203 rows and 250 termination receipts.
    assert "COPY of the 1,453 rows the mirror wrote into an empty console" in done.stdout
    assert "incremental, nothing changed:" in done.stdout
