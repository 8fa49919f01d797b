"""The mirror benchmark runs end to end on a small fleet (README, Benchmarks):
a benchmark that no longer runs measures nothing. It builds Paperclip's real
DDL, so a table the mirror gains (better-auth's "user", a reserved word in
PostgreSQL) reaches its floor query too."""

import re
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


_SPLIT = re.compile(
    r"per batch: +(?P<batch>[\d.]+) ms = database +(?P<database>[\d.]+) ms "
    r"\((?P<count>\d+) statements (?P<statements>[\d.]+) ms, commits (?P<commits>[\d.]+) ms\) "
    r"\+ Python +(?P<python>[\d.]+) ms"
)


@pytest.mark.slow
def test_the_ingest_benchmark_splits_each_batch_into_database_and_python_time():
    """Each path's batch, as the database's time (statements and commits) and
    Python's, beside the floor's batch: the parts add up to the batch, and
    the API's commits (one a batch) are timed."""
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/ingest_throughput.py",
            "--events",
            "2000",
            "--batch",
            "500",
            "--rss-events",
            "",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if "per batch:" in line}
    assert set(lines) == {"API", "load_events"}, done.stdout
    for line in lines.values():
        split = _SPLIT.search(line)
        assert split, line
        ms = {k: float(v) for k, v in split.groupdict().items()}
        assert abs(ms["database"] + ms["python"] - ms["batch"]) <= 0.2, line
        assert abs(ms["statements"] + ms["commits"] - ms["database"]) <= 0.2, line
        # The event ids, the read and the insert at least, in every batch.
        assert ms["count"] >= 3, line
        assert "the floor's batch" in line and "the database alone is" in line, line
    # The API commits each batch.
    assert float(_SPLIT.search(lines["API"])["commits"]) > 0
