"""The simulator itself: Daytona shapes, destroy semantics, runtime faults, call log."""

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devtools.simulator import FaultConfig, SimulatorServer
from tests.providers.conftest import API_KEY, make_client

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def client(simulator):
    return httpx.Client(base_url=simulator.url, headers=AUTH, timeout=5)


def test_seeding_answers_the_sandbox_started_with_its_toolbox(simulator):
    with client(simulator) as http:
        body = http.post("/sandbox", json={"name": "n", "labels": {"a": "b"}}).json()
        assert body["state"] == "started" and body["labels"] == {"a": "b"}
        assert body["toolboxProxyUrl"] == f"{simulator.url}/toolbox"
        assert http.get("/sandbox/n").json()["id"] == body["id"]


def test_delete_is_soft_then_destroying_then_404(simulator, sim):
    # daytonaio/daytona apps/api/src/sandbox/services/sandbox.service.ts destroy() and
    # entities/sandbox.entity.ts getSoftDeleteUpdate: desiredState first, renamed.
    with client(simulator) as http:
        sid = http.post("/sandbox", json={"name": "n"}).json()["id"]
        sim.sandbox(sid, transition_seconds=0.2, stuck=True)
        answer = http.delete(f"/sandbox/{sid}")
        assert answer.status_code == 200
        assert answer.json()["id"] == sid and answer.json()["desiredState"] == "destroyed"
        assert answer.json()["name"].startswith("DESTROYED_n_")
        assert answer.json()["state"] == "started"  # pending: the old state stays a while
        assert http.get("/sandbox/n").status_code == 404  # the old name is free
        assert http.delete(f"/sandbox/{sid}").status_code == 409  # already pending
        time.sleep(0.15)
        shown = http.get(f"/sandbox/{sid}").json()
        assert (shown["state"], shown["desiredState"]) == ("destroying", "destroyed")
        sim.sandbox(sid, stuck=False)
        time.sleep(0.25)
        assert http.get(f"/sandbox/{sid}").status_code == 404
        assert http.delete(f"/sandbox/{sid}").status_code == 404
        assert http.get("/sandbox").json()["items"] == []


def test_lifecycle_calls_during_a_transition_conflict(simulator, sim):
    with client(simulator) as http:
        sid = http.post("/sandbox", json={"name": "n"}).json()["id"]
        sim.sandbox(sid, transition_seconds=5)
        http.post(f"/sandbox/{sid}/stop")
        answer = http.post(f"/sandbox/{sid}/start")
        assert answer.status_code == 409
        assert answer.json()["message"] == "Sandbox state change in progress"
        sim.faults(legacy_400=True)
        assert http.post(f"/sandbox/{sid}/start").status_code == 400


def test_toolbox_needs_a_started_sandbox(simulator):
    with client(simulator) as http:
        sid = http.post("/sandbox", json={"name": "n"}).json()["id"]
        http.post(f"/sandbox/{sid}/stop")
        time.sleep(0.05)
        answer = http.post(f"/toolbox/{sid}/process/execute", json={"command": "ls"})
        assert answer.status_code == 400


def _digests_and_downloads(daytona, sid):
    digests = daytona.hash_files(sid, "workspace")
    downloaded = {
        path: hashlib.sha256(b"".join(chunks)).hexdigest()
        for path, chunks in daytona.open_files(sid, "workspace", sorted(digests))
    }
    return {p: d.sha256 for p, d in digests.items()}, downloaded


def test_a_lying_toolbox_downloads_other_bytes_than_it_lists(daytona, sim):
    files = {"a.txt": b"alpha\n", "empty.log": b""}
    sid = daytona.create("liar", {}, files=files).id
    listed, downloaded = _digests_and_downloads(daytona, sid)
    assert listed == downloaded  # an honest toolbox
    sim.sandbox(sid, lie_downloads=True)
    listed, downloaded = _digests_and_downloads(daytona, sid)
    assert listed == {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
    assert all(downloaded[p] != listed[p] for p in files)
    described = sim.describe(sid)
    assert described["lies"] == 1 and described["lie_downloads"] is True
    assert described["files"]["/home/daytona/workspace/a.txt"]["size"] == 6


def test_a_flapping_file_changes_on_every_start_and_a_destroyed_sandbox_is_described(daytona, sim):
    sid = daytona.create("flap", {}, files={"a.txt": b"alpha\n"}).id
    sim.sandbox(sid, flap="workspace/logs/boot.log")
    seen = []
    for _ in range(3):
        daytona.stop(sid)
        daytona.start(sid)
        listed, downloaded = _digests_and_downloads(daytona, sid)
        assert listed == downloaded  # within one start the file holds still
        seen.append(listed["logs/boot.log"])
    assert len(set(seen)) == 3
    daytona.destroy(sid)
    described = sim.describe(sid)
    assert described["state"] == "destroyed" and described["starts"] == 3
    held = described["files"]["/home/daytona/workspace/logs/boot.log"]["sha256"]
    assert held == seen[-1]
    assert httpx.post(f"{sim.url}/_sim/sandboxes/{sid}", json={"flap": 3}).status_code == 400
    assert httpx.get(f"{sim.url}/_sim/sandboxes/nope").status_code == 404


def test_a_seeded_lie_rate_lies_on_some_downloads():
    with SimulatorServer(seed=5, config=FaultConfig(lie_rate=0.5)) as srv:
        client = make_client(srv.url, api_key=None)
        sid = client.create("n", {}, files={"a.txt": b"alpha\n"}).id
        honest = hashlib.sha256(b"alpha\n").hexdigest()
        answers = [
            hashlib.sha256(b"".join(c)).hexdigest() == honest
            for _ in range(20)
            for _p, c in client.open_files(sid, "workspace", ["a.txt"])
        ]
        client.close()
    assert True in answers and False in answers


def test_unauthenticated_calls_are_refused(simulator):
    assert httpx.get(f"{simulator.url}/sandbox").status_code == 401


def test_call_log_filters_and_resets(simulator, sim):
    with client(simulator) as http:
        http.post("/sandbox", json={"name": "n"})
        http.get("/sandbox/n")
    assert [c["operation"] for c in sim.calls()] == ["create", "get"]
    assert len(sim.calls(operation="get")) == 1
    sim.reset()
    assert sim.calls() == []


def test_bad_fault_settings_are_refused(simulator):
    answer = httpx.post(f"{simulator.url}/_sim/faults", json={"global": {"nope": 1}})
    assert answer.status_code == 400


def test_seeded_faults_are_reproducible():
    def statuses():
        config = FaultConfig(error_rate=0.5)
        with SimulatorServer(seed=42, config=config) as srv, httpx.Client() as http:
            return [http.get(f"{srv.url}/sandbox").status_code for _ in range(20)]

    first = statuses()
    assert first == statuses() and {200, 503} <= set(first)


def test_survives_thousands_of_calls():
    with SimulatorServer() as srv, httpx.Client(base_url=srv.url) as http:
        for _ in range(2000):
            assert http.get("/sandbox").status_code == 200
        assert len(srv.control.calls()) == 2000


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="uses a subprocess on loopback")
def test_the_management_command_serves_until_stopped():
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings"}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "provider_simulator", "--port", "0", "--seed", "3"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line
        url = line.rsplit(" ", 1)[-1].strip()
        assert httpx.get(f"{url}/sandbox").json() == {"items": [], "nextCursor": None}
    finally:
        process.terminate()
        process.wait(timeout=10)
