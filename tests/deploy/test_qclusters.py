"""Two django-q2 clusters on one machine, Redis as the broker and PostgreSQL as
the database, share one pass's candidates: every sandbox is retired exactly
once, and both clusters did part of the work."""

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import redis

from devtools.simulator import HOME, FaultConfig, SimulatorServer

from .helpers import PYTHON, ROOT, manage, production_env

N = 60
FILES = {"README.md": "# task\n", "src/app.py": "print('saved')\n"}
SERVER = "postgresql://postgres@127.0.0.1:5432"
REDIS_DB = 7


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (the cluster's sentinel, workers, monitor, pusher)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what we started
            proc.wait()


@pytest.fixture
def scratch_db():
    name = f"h7_qcluster_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{SERVER}/{name}".replace("postgresql://", "postgres://")
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def broker():
    url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def simulator():
    config = FaultConfig(transition_seconds=0.0, latency=0.02)
    with SimulatorServer(seed=7, config=config) as srv:
        yield srv


def seed_sandboxes(srv, n):
    ids = []
    with srv.sim.lock:
        for i in range(n):
            sid = srv.sim.create({"name": f"qcluster-{i}"})["id"]
            sb = srv.sim.sandboxes[sid]
            sb.dirs.update({f"{HOME}/workspace", f"{HOME}/workspace/src"})
            for path, data in FILES.items():
                sb.files[f"{HOME}/workspace/{path}"] = data.encode()
            sb.state = "stopped"
            ids.append(sid)
    return ids


@pytest.mark.slow
def test_two_clusters_split_one_pass_without_processing_a_candidate_twice(
    scratch_db, broker, simulator, tmp_path
):
    env = production_env(
        DATABASE_URL=scratch_db,
        REDIS_URL=broker,
        Q_WORKERS=1,
        DAYTONA_API_KEY="unused",
        CONSOLE_VAR_DIR=tmp_path / "var",
    )
    done = manage("migrate", "--noinput", "-v", "0", env=env)
    assert done.returncode == 0, done.stderr
    ids = seed_sandboxes(simulator, N)
    built = subprocess.run(
        [PYTHON, "-m", "tests.deploy.qcluster_fleet"],
        cwd=ROOT,
        env=env,
        input=json.dumps({"simulator_url": simulator.url, "sandbox_ids": ids, "files": FILES}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == str(N)
    simulator.sim.calls.clear()

    logs = [tmp_path / f"cluster-{i}.log" for i in range(2)]
    clusters = []
    try:
        for log in logs:
            with log.open("w") as out:
                clusters.append(
                    subprocess.Popen(
                        [PYTHON, "manage.py", "qcluster"],
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 30
        while not all("ready for work" in log.read_text() for log in logs):
            for proc, log in zip(clusters, logs, strict=True):
                assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, [log.read_text() for log in logs]
            time.sleep(0.1)

        # Two passes of the reconciler's own task, enqueued the way the schedule does.
        enqueue = manage(
            "shell",
            "-c",
            "from django_q.tasks import async_task\n"
            "for _ in range(2):\n"
            "    async_task('sandboxes.reconciler.tasks.reconcile_pass')\n",
            env=env,
        )
        assert enqueue.returncode == 0, enqueue.stderr

        with psycopg.connect(scratch_db, autocommit=True) as db:
            deadline = time.monotonic() + 45
            while True:
                finished = db.execute(
                    "SELECT count(*) FROM sandboxes_reconcilerpass WHERE finished_at IS NOT NULL"
                ).fetchone()[0]
                if finished >= 2:
                    break
                assert time.monotonic() < deadline, [log.read_text() for log in logs]
                time.sleep(0.2)
            passes = db.execute(
                "SELECT worker, candidates, retired, failed, errors FROM sandboxes_reconcilerpass"
            ).fetchall()
            stages = dict(
                db.execute(
                    "SELECT stage, count(*) FROM sandboxes_retirement GROUP BY stage"
                ).fetchall()
            )
            receipts = Counter(
                dict(
                    db.execute(
                        "SELECT kind, count(*) FROM sandboxes_receipt "
                        "WHERE kind IN ('salvage_compare', 'retirement') GROUP BY kind"
                    ).fetchall()
                )
            )
            per_lease = db.execute(
                "SELECT max(n) FROM (SELECT count(*) AS n FROM sandboxes_receipt "
                "WHERE kind = 'retirement' GROUP BY lease_id) t"
            ).fetchone()[0]
        members = [descendants(proc.pid) for proc in clusters]
    finally:
        for proc in clusters:
            stop(proc)

    # Every candidate retired once: one DELETE per sandbox at the provider, one
    # compare and one retirement receipt per lease, one record per sandbox.
    deletes = Counter(c["sandbox_id"] for c in simulator.sim.calls if c["method"] == "DELETE")
    assert set(deletes) == set(ids)
    assert max(deletes.values()) == 1
    assert stages == {"retired": N}
    assert receipts == {"salvage_compare": N, "retirement": N}
    assert per_lease == 1
    assert all(not errors for *_, errors in passes), passes

    # The pass's candidates were split: each cluster's worker retired some.
    retired_by_cluster = Counter()
    for worker, _candidates, retired, _failed, _errors in passes:
        pid = int(worker.rsplit(":", 1)[1])
        owner = [i for i, pids in enumerate(members) if pid in pids]
        assert len(owner) == 1, (worker, members)
        retired_by_cluster[owner[0]] += retired
    assert sum(retired_by_cluster.values()) == N
    assert retired_by_cluster[0] > 0 and retired_by_cluster[1] > 0, retired_by_cluster
