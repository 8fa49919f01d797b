"""The Daytona client against the simulator over real loopback HTTP."""

import hashlib
import json
import threading
import time

import pytest

from sandboxes.providers.base import (
    BudgetExhausted,
    ProviderAuthError,
    ProviderError,
    RootNotFound,
    SandboxNotFound,
    SandboxState,
    TransientProviderError,
    UnsafePath,
)
from sandboxes.providers.daytona import _retry_after
from tests.providers.conftest import make_client

FILES = {
    "a.txt": b"hello",
    "dir with space/b c.txt": b"spaced out",
    "nested/deeper/new\nline.bin": bytes(range(256)) * 4,
    "empty": b"",
}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seeded(daytona, name="box", labels=None, files=None):
    return daytona.create(name, labels or {"team": "t"}, files)


# --- reads ------------------------------------------------------------------


def test_it_reads_state_without_touching_last_activity(daytona, sim):
    box = seeded(daytona)
    info = daytona.get(box.id)
    assert info.state == SandboxState.STARTED
    assert info.labels == {"team": "t"}
    assert info.toolbox_proxy_url.endswith("/toolbox")
    [call] = sim.calls(operation="get", sandbox_id=box.id)[-1:]
    assert call["skip_activity"] is True


def test_get_accepts_the_name(daytona):
    box = seeded(daytona, name="warm-PAP-1")
    assert daytona.get("warm-PAP-1").id == box.id


def test_get_of_a_missing_sandbox_is_destroyed_not_an_error(daytona):
    assert daytona.get("no-such-sandbox").state == SandboxState.DESTROYED


def test_list_pages_through_three_pages_with_labels_as_json(daytona, sim, simulator):
    sim.faults(page_size=2)
    ids = {seeded(daytona, name=f"k{i}", labels={"kept": "yes"}).id for i in range(6)}
    seeded(daytona, name="other", labels={"kept": "no"})
    sim.reset()

    listed = list(daytona.list({"kept": "yes"}))

    assert {s.id for s in listed} == ids
    calls = sim.calls(operation="list")
    assert len(calls) == 3
    assert [c["query"].get("cursor") for c in calls] == [None, "2", "4"]
    assert all(json.loads(c["query"]["labels"]) == {"kept": "yes"} for c in calls)
    assert all(c["skip_activity"] for c in calls)


def test_list_accepts_a_bare_array(daytona, sim):
    sim.faults(list_shape="array")
    for i in range(3):
        seeded(daytona, name=f"k{i}")
    sim.reset()
    assert sorted(s.name for s in daytona.list()) == ["k0", "k1", "k2"]
    assert len(sim.calls(operation="list")) == 1


def test_list_retries_a_failed_page(daytona, sim):
    sim.faults(page_size=1)
    for i in range(3):
        seeded(daytona, name=f"k{i}")
    sim.faults(script=[{"operation": "list", "status": 502, "times": 1}])
    assert len(list(daytona.list())) == 3


# --- lifecycle ----------------------------------------------------------------


def test_stop_waits_through_stopping_and_confirms(daytona, sim):
    box = seeded(daytona)
    sim.sandbox(box.id, transition_seconds=0.1)
    sim.reset()

    confirmation = daytona.stop(box.id)

    assert confirmation.state == SandboxState.STOPPED
    assert confirmation.sandbox_id == box.id
    assert confirmation.operation == "stop"
    assert confirmation.confirmed_at.tzinfo is not None
    calls = sim.calls()
    assert calls[0]["operation"] == "stop" and calls[0]["method"] == "POST"
    assert {c["request_id"] for c in calls} == {confirmation.request_id}
    assert calls[-1]["operation"] == "get"
    payload = confirmation.as_payload()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["state"] == "stopped"


def test_stop_of_a_stopped_sandbox_confirms_without_failing(daytona):
    box = seeded(daytona)
    daytona.stop(box.id)
    assert daytona.stop(box.id).state == SandboxState.STOPPED


def test_start_restores_an_archived_sandbox(daytona):
    box = seeded(daytona)
    daytona.stop(box.id)
    assert daytona.archive(box.id).state == SandboxState.ARCHIVED
    assert daytona.start(box.id).state == SandboxState.STARTED


def test_archive_stops_a_running_sandbox_first(daytona, sim):
    box = seeded(daytona)
    assert daytona.archive(box.id).state == SandboxState.ARCHIVED
    operations = [c["operation"] for c in sim.calls(method="POST", sandbox_id=box.id)]
    assert "stop" in operations and operations[-1] == "archive"


def test_start_of_a_destroyed_sandbox_is_not_found(daytona):
    box = seeded(daytona)
    daytona.destroy(box.id)
    with pytest.raises(SandboxNotFound):
        daytona.start(box.id)


def test_destroy_deletes_then_confirms_with_a_read(daytona, sim):
    box = seeded(daytona)
    sim.sandbox(box.id, transition_seconds=0.05)
    sim.reset()

    confirmation = daytona.destroy(box.id)

    assert confirmation.state == SandboxState.DESTROYED
    calls = sim.calls()
    assert calls[0]["method"] == "DELETE"
    assert calls[-1]["operation"] == "get" and calls[-1]["status"] == 404
    assert daytona.get(box.id).state == SandboxState.DESTROYED


def test_destroying_a_gone_sandbox_is_success(daytona, sim):
    box = seeded(daytona)
    daytona.destroy(box.id)
    sim.reset()
    assert daytona.destroy(box.id).state == SandboxState.DESTROYED
    assert daytona.destroy("never-existed").state == SandboxState.DESTROYED
    assert [c["status"] for c in sim.calls(method="DELETE")] == [404, 404]


@pytest.mark.slow
def test_destroy_retries_while_a_state_change_is_in_progress(daytona, sim):
    box = seeded(daytona)
    sim.sandbox(box.id, conflict_seconds=1.0)
    assert daytona.destroy(box.id).state == SandboxState.DESTROYED
    assert 409 in [c["status"] for c in sim.calls(method="DELETE")]


# --- faults -------------------------------------------------------------------


def test_5xx_recovers_within_the_budget(daytona, sim):
    box = seeded(daytona)
    sim.faults(script=[{"operation": "get", "status": 503, "times": 2}])
    assert daytona.get(box.id).state == SandboxState.STARTED
    assert [c["status"] for c in sim.calls(operation="get")][-3:] == [503, 503, 200]


@pytest.mark.slow
def test_5xx_that_persists_exhausts_the_budget_with_a_classified_error(simulator, sim):
    client = make_client(simulator.url, budget_seconds=0.5)
    box = client.create("b", {})
    sim.faults(error_rate=1.0)
    started = time.monotonic()
    with pytest.raises(BudgetExhausted) as raised:
        client.stop(box.id)
    assert time.monotonic() - started < 1.5
    error = raised.value
    assert error.transient and error.status_code == 503
    assert error.operation == "stop" and error.sandbox_id == box.id
    assert "budget" in str(error)


@pytest.mark.slow
def test_a_409_window_is_waited_out(daytona, sim):
    box = seeded(daytona)
    sim.sandbox(box.id, conflict_seconds=1.0)
    assert daytona.stop(box.id).state == SandboxState.STOPPED
    assert 409 in [c["status"] for c in sim.calls(operation="stop")]


@pytest.mark.slow
def test_legacy_400_state_change_in_progress_is_transient(daytona, sim):
    box = seeded(daytona)
    sim.faults(legacy_400=True)
    sim.sandbox(box.id, conflict_seconds=1.0)
    assert daytona.stop(box.id).state == SandboxState.STOPPED
    assert 400 in [c["status"] for c in sim.calls(operation="stop")]


def test_other_400s_fail_fast(daytona, sim):
    box = seeded(daytona)
    sim.faults(script=[{"operation": "stop", "status": 400, "message": "bad", "times": 99}])
    sim.sandbox(box.id, state="error")
    with pytest.raises(ProviderError) as raised:
        daytona.stop(box.id)
    assert not raised.value.transient and raised.value.status_code == 400


def test_429_honours_retry_after(daytona, sim):
    box = seeded(daytona)
    sim.faults(script=[{"operation": "get", "status": 429, "retry_after": 0.3, "times": 1}])
    started = time.monotonic()
    assert daytona.get(box.id).state == SandboxState.STARTED
    assert time.monotonic() - started >= 0.3


def test_429_asking_for_more_than_the_budget_gives_up_at_once(daytona, sim):
    box = seeded(daytona)
    sim.faults(script=[{"operation": "get", "status": 429, "retry_after": 60, "times": 1}])
    started = time.monotonic()
    with pytest.raises(BudgetExhausted) as raised:
        daytona.get(box.id)
    assert time.monotonic() - started < 1
    assert raised.value.status_code == 429 and "60" in str(raised.value)


def test_dropped_connections_are_retried(daytona, sim):
    box = seeded(daytona)
    sim.faults(script=[{"operation": "stop", "drop": True, "times": 2}])
    assert daytona.stop(box.id).state == SandboxState.STOPPED
    assert [c["status"] for c in sim.calls(operation="stop")][:2] == [0, 0]


@pytest.mark.slow
def test_connections_that_always_drop_exhaust_the_budget(simulator, sim):
    client = make_client(simulator.url, budget_seconds=0.4)
    box = client.create("b", {})
    sim.faults(drop_rate=1.0)
    with pytest.raises(BudgetExhausted) as raised:
        client.get(box.id)
    assert raised.value.status_code is None
    assert "cut" in str(raised.value) or "connect" in str(raised.value)


def test_latency_below_the_timeout_is_tolerated(daytona, sim):
    box = seeded(daytona)
    sim.faults(latency=0.05)
    assert daytona.stop(box.id).state == SandboxState.STOPPED


@pytest.mark.slow
def test_latency_beyond_the_request_timeout_is_a_transient_timeout(simulator, sim):
    client = make_client(simulator.url, budget_seconds=0.6, request_timeout=0.1)
    box = client.create("b", {})
    sim.faults(latency=0.3)
    with pytest.raises(BudgetExhausted) as raised:
        client.get(box.id)
    assert "timed out" in str(raised.value)


@pytest.mark.slow
def test_a_stuck_transition_fails_with_the_state_it_is_stuck_in(simulator, sim):
    client = make_client(simulator.url, budget_seconds=0.4)
    box = client.create("b", {})
    sim.sandbox(box.id, stuck=True)
    with pytest.raises(BudgetExhausted) as raised:
        client.stop(box.id)
    assert "stopping" in str(raised.value)


def test_seeded_chaos_still_completes_a_lifecycle(simulator, sim):
    client = make_client(simulator.url, budget_seconds=10)
    box = client.create("chaos", {}, {"f.txt": b"x"})
    sim.faults(error_rate=0.2, drop_rate=0.1, rate_limit_rate=0.1, retry_after=0.01)
    assert client.stop(box.id).state == SandboxState.STOPPED
    assert client.hash_files(box.id, "workspace")["f.txt"].sha256 == digest(b"x")
    assert client.destroy(box.id).state == SandboxState.DESTROYED


# --- auth -----------------------------------------------------------------------


def test_401_is_never_retried(simulator, sim):
    client = make_client(simulator.url, api_key="wrong")
    sim.reset()
    with pytest.raises(ProviderAuthError) as raised:
        client.stop("any")
    assert len(sim.calls()) == 1
    assert raised.value.status_code == 401 and not raised.value.transient
    assert "DAYTONA_API_KEY" in str(raised.value)


def test_403_is_never_retried(daytona, sim):
    box = seeded(daytona)
    sim.reset()
    sim.faults(script=[{"status": 403, "times": 5}])
    with pytest.raises(ProviderAuthError):
        daytona.get(box.id)
    assert len(sim.calls()) == 1


# --- files ----------------------------------------------------------------------


def test_hash_files_on_a_stopped_sandbox_starts_it_first(daytona, sim):
    box = seeded(daytona, files=FILES)
    daytona.stop(box.id)
    sim.reset()

    digests = daytona.hash_files(box.id, "workspace")

    assert {p: (d.sha256, d.size) for p, d in digests.items()} == {
        p: (digest(data), len(data)) for p, data in FILES.items()
    }
    operations = [c["operation"] for c in sim.calls()]
    assert operations.index("start") < operations.index("execute")
    assert daytona.get(box.id).state == SandboxState.STARTED


def test_hash_files_falls_back_to_downloading_without_sha256sum(daytona, sim):
    box = seeded(daytona, files=FILES)
    remote = daytona.hash_files(box.id, "workspace")
    sim.sandbox(box.id, no_sha256sum=True)
    sim.reset()

    downloaded = daytona.hash_files(box.id, "workspace")

    assert downloaded == remote
    operations = [c["operation"] for c in sim.calls()]
    assert operations.count("execute") == 2 and "bulk_download" in operations


def test_hash_files_of_a_missing_root_is_an_error_not_an_empty_manifest(daytona):
    box = seeded(daytona, files=FILES)
    with pytest.raises(RootNotFound):
        daytona.hash_files(box.id, "no-such-dir")


def test_open_files_on_a_stopped_sandbox_starts_it_and_streams(daytona, sim):
    big = bytes(range(256)) * 4096  # 1 MiB: several chunks
    box = seeded(daytona, files={**FILES, "big.bin": big})
    daytona.stop(box.id)
    sim.reset()

    seen = {}
    for path, chunks in daytona.open_files(box.id, "workspace", ["big.bin", "a.txt", "empty"]):
        pieces = list(chunks)
        seen[path] = (len(pieces), b"".join(pieces))

    assert seen["big.bin"][1] == big and seen["big.bin"][0] > 1
    assert seen["a.txt"][1] == b"hello" and seen["empty"][1] == b""
    operations = [c["operation"] for c in sim.calls()]
    assert operations.index("start") < operations.index("bulk_download")


def test_open_files_drains_bodies_the_caller_skips(daytona):
    box = seeded(daytona, files=FILES)
    paths = ["a.txt", "dir with space/b c.txt", "nested/deeper/new\nline.bin"]
    got = {}
    for path, chunks in daytona.open_files(box.id, "workspace", paths):
        if path != "dir with space/b c.txt":
            got[path] = b"".join(chunks)
    assert got == {p: FILES[p] for p in paths if p != "dir with space/b c.txt"}


def test_open_files_retries_a_dropped_bulk_download(daytona, sim):
    box = seeded(daytona, files=FILES)
    sim.faults(script=[{"operation": "bulk_download", "drop": True, "times": 1}])
    got = {p: b"".join(c) for p, c in daytona.open_files(box.id, "workspace", ["a.txt"])}
    assert got == {"a.txt": b"hello"}


def test_open_files_of_a_missing_file_is_an_error(daytona):
    box = seeded(daytona, files=FILES)
    with pytest.raises(ProviderError) as raised:
        for _path, chunks in daytona.open_files(box.id, "workspace", ["nope"]):
            list(chunks)
    assert raised.value.status_code == 404


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", ""])
def test_open_files_refuses_traversal_before_any_call(daytona, sim, path):
    sim.reset()
    with pytest.raises(UnsafePath):
        list(daytona.open_files("any", "workspace", [path]))
    assert sim.calls() == []


# --- plumbing -------------------------------------------------------------------------


def test_the_concurrency_cap_bounds_calls_in_flight(simulator, sim):
    client = make_client(simulator.url, max_concurrency=2)
    box = client.create("b", {})
    sim.faults(latency=0.1)
    threads = [threading.Thread(target=client.get, args=(box.id,)) for _ in range(6)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started >= 0.3  # 6 calls, 2 at a time, 0.1 s each


def test_hooks_see_every_operation_and_its_error(daytona, hook_calls):
    box = seeded(daytona)
    daytona.stop(box.id)
    with pytest.raises(SandboxNotFound):
        daytona.start("gone")
    by_operation = {op: error for _provider, op, _seconds, error in hook_calls}
    assert by_operation["stop"] is None
    assert by_operation["start"] is SandboxNotFound
    assert all(p == "daytona" and s >= 0 for p, _op, s, _e in hook_calls)


def test_transient_errors_are_provider_errors():
    assert issubclass(BudgetExhausted, TransientProviderError)
    assert issubclass(TransientProviderError, ProviderError)


@pytest.mark.parametrize(
    ("value", "expected"), [("2", 2.0), ("0.5", 0.5), (None, None), ("junk", None)]
)
def test_retry_after_parsing(value, expected):
    assert _retry_after(value) == expected


def test_open_files_falls_back_to_single_downloads_without_bulk_download(daytona, sim):
    box = seeded(daytona, files=FILES)
    sim.faults(script=[{"operation": "bulk_download", "status": 404, "times": 99}])
    paths = list(FILES)
    got = {p: b"".join(c) for p, c in daytona.open_files(box.id, "workspace", paths)}
    assert got == FILES
    downloads = sim.calls(operation="download")
    assert len(downloads) == len(FILES) and all(c["skip_activity"] for c in downloads)


# --- sandbox ids and names are one URL path segment (review finding 9) --------------------


@pytest.mark.parametrize("name", ["warm PAP/1", "a?b#c", "../sandbox"])
def test_a_name_with_url_characters_names_only_its_sandbox(daytona, sim, name):
    box = seeded(daytona, name=name)
    assert daytona.get(name).id == box.id
    assert daytona.stop(name).state == SandboxState.STOPPED
    assert daytona.get(box.id).state == SandboxState.STOPPED
    daytona.destroy(name)
    assert daytona.get(box.id).state == SandboxState.DESTROYED


def test_the_sandbox_url_quotes_the_id_as_one_segment(daytona):
    assert daytona._sandbox_url("a b/c?d#e%f").endswith("/sandbox/a%20b%2Fc%3Fd%23e%25f")
