"""Conformance with Daytona's published API (issue 12).

Daytona's own clients are the judge: `daytona-api-client` and
`daytona-toolbox-api-client` (pinned in the dev extras, generated from Daytona's
OpenAPI spec) drive the simulator over loopback, and every answer must
deserialize into their models with no field left over. Then recorded Daytona
wire formats are replayed byte for byte through the project's client (an
httpx.MockTransport; each recording cites the daytonaio/daytona source that
writes it), and the same behaviour is checked end to end against the simulator.
"""

import hashlib
import json
import re
import time
import urllib.parse

import daytona_api_client as api
import daytona_toolbox_api_client as toolbox_api
import httpx
import pytest

from devtools.simulator import STATES
from sandboxes.providers import wire
from sandboxes.providers.base import (
    SETTLED_STATES,
    TRANSITIONAL_STATES,
    ProviderError,
    SandboxState,
)
from sandboxes.providers.daytona import _DESIRED, SERVER_START_WAIT_SECONDS, DaytonaProvider
from tests.providers.conftest import API_KEY, make_client

OFFICIAL_STATES = [s for s in api.SandboxState if s != api.SandboxState.UNKNOWN_DEFAULT_OPEN_API]


# --- A. the official clients drive the simulator ----------------------------------------


@pytest.fixture
def sandboxes(simulator):
    client = api.ApiClient(api.Configuration(host=simulator.url, access_token=API_KEY))
    return api.SandboxApi(client)


def toolbox_for(sandbox: api.Sandbox) -> api.ApiClient:
    """The toolbox base URL is `{toolboxProxyUrl}/{sandboxId}` (the toolbox client's
    own description); auth is the API key as a bearer token."""
    client = toolbox_api.ApiClient(
        toolbox_api.Configuration(host=f"{sandbox.toolbox_proxy_url}/{sandbox.id}")
    )
    client.default_headers["Authorization"] = f"Bearer {API_KEY}"
    client.default_headers["X-Daytona-Skip-Last-Activity-Update"] = "true"
    return client


def strict(model):
    """Every field the simulator sent is one the official model knows."""
    assert model.additional_properties == {}, model.additional_properties
    return model


def wait_for(sandboxes, sid, state, timeout=5.0):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sb = strict(sandboxes.get_sandbox(sid))
        seen.append((sb.state.value, sb.desired_state.value))
        if sb.state == state and sb.desired_state.value == state.value:
            return seen
        time.sleep(0.01)
    raise AssertionError(f"{sid} never reached {state}: {seen[-5:]}")


def test_every_official_state_is_known_to_the_client():
    assert len(OFFICIAL_STATES) == 22
    assert {s.value for s in OFFICIAL_STATES} == {s.value for s in SandboxState} == set(STATES)
    for state in OFFICIAL_STATES:
        assert SandboxState.parse(state.value).value == state.value
    assert SandboxState.PAUSED in SETTLED_STATES and SandboxState.PAUSED not in TRANSITIONAL_STATES
    assert set(SandboxState) == SETTLED_STATES | TRANSITIONAL_STATES
    official_desired = {s.value for s in api.SandboxDesiredState}
    assert set(_DESIRED.values()) | {"destroyed"} <= official_desired


def test_the_official_client_drives_a_whole_lifecycle(sandboxes, sim):
    sim.faults(transition_seconds=0.1)
    created = strict(
        sandboxes.create_sandbox(api.CreateSandbox(name="conf-1", labels={"kept": "yes"}))
    )
    assert created.state == api.SandboxState.STARTED
    assert (created.cpu, created.memory, created.disk) == (1, 1, 3)
    assert strict(sandboxes.get_sandbox(created.id)).name == "conf-1"
    assert strict(sandboxes.get_sandbox("conf-1")).id == created.id
    assert strict(sandboxes.get_toolbox_proxy_url(created.id)).url == created.toolbox_proxy_url

    sim.faults(stuck=True)  # transitions show, but do not finish, until released
    stopping = strict(sandboxes.stop_sandbox(created.id))
    # stop() answers at once: the state stays while desiredState moves.
    assert (stopping.state, stopping.desired_state) == (
        api.SandboxState.STARTED,
        api.SandboxDesiredState.STOPPED,
    )
    time.sleep(0.1)
    shown = strict(sandboxes.get_sandbox(created.id))
    assert (shown.state, shown.desired_state) == (
        api.SandboxState.STOPPING,
        api.SandboxDesiredState.STOPPED,
    )
    sim.faults(stuck=False)
    wait_for(sandboxes, created.id, api.SandboxState.STOPPED)
    strict(sandboxes.archive_sandbox(created.id))
    wait_for(sandboxes, created.id, api.SandboxState.ARCHIVED)
    restoring = strict(sandboxes.start_sandbox(created.id))
    assert restoring.desired_state == api.SandboxDesiredState.STARTED
    wait_for(sandboxes, created.id, api.SandboxState.STARTED)
    stopped = strict(sandboxes.stop_sandbox(created.id))
    wait_for(sandboxes, stopped.id, api.SandboxState.STOPPED)
    # The start holds its answer until the sandbox runs (waitForSandboxStarted).
    assert strict(sandboxes.start_sandbox(created.id)).state == api.SandboxState.STARTED

    sim.faults(stuck=True)
    deleted = strict(sandboxes.delete_sandbox(created.id))
    assert deleted.desired_state == api.SandboxDesiredState.DESTROYED
    assert deleted.name.startswith("DESTROYED_conf-1_")
    with pytest.raises(api.ApiException) as by_name:
        sandboxes.get_sandbox("conf-1")
    assert by_name.value.status == 404
    time.sleep(0.1)
    assert strict(sandboxes.get_sandbox(created.id)).state == api.SandboxState.DESTROYING
    sim.faults(stuck=False)
    with pytest.raises(api.ApiException) as gone:
        for _ in range(500):
            strict(sandboxes.get_sandbox(created.id))
            time.sleep(0.01)
    assert gone.value.status == 404
    body = json.loads(gone.value.body)
    assert body["statusCode"] == 404 and body["error"] == "Not Found" and body["message"]


def test_the_official_client_lists_with_labels_and_a_cursor(sandboxes, sim):
    kept = {
        strict(sandboxes.create_sandbox(api.CreateSandbox(name=f"k{i}", labels={"kept": "yes"}))).id
        for i in range(5)
    }
    sandboxes.create_sandbox(api.CreateSandbox(name="other", labels={"kept": "no"}))
    listed, cursor, pages = set(), None, 0
    while True:
        page = strict(
            sandboxes.list_sandboxes(labels=json.dumps({"kept": "yes"}), limit=2, cursor=cursor)
        )
        pages += 1
        for item in page.items:
            strict(item)
            assert isinstance(item, api.SandboxListItem) and item.labels == {"kept": "yes"}
            assert item.cpu >= 1 and item.memory >= 1 and item.disk >= 1
            listed.add(item.id)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert listed == kept and pages == 3
    one = strict(sandboxes.list_sandboxes(states=[api.SandboxState.STARTED], name="k0"))
    assert [i.name for i in one.items] == ["k0"]


def test_the_deprecated_paginated_list_answers_sandboxes(simulator, sandboxes):
    for i in range(3):
        sandboxes.create_sandbox(api.CreateSandbox(name=f"p{i}", labels={"p": "1"}))
    # sandbox.controller.ts listSandboxesPaginated -> PaginatedSandboxesDtoDeprecated.
    body = httpx.get(
        f"{simulator.url}/sandbox/paginated",
        params={"page": 2, "limit": 2, "labels": json.dumps({"p": "1"})},
        headers={"Authorization": f"Bearer {API_KEY}"},
    ).json()
    assert (body["total"], body["page"], body["totalPages"]) == (3, 2, 2)
    [item] = body["items"]
    strict(api.Sandbox.from_dict(item))


def test_the_toolbox_client_uploads_downloads_and_executes(sandboxes, simulator):
    box = strict(sandboxes.create_sandbox(api.CreateSandbox(name="tb")))
    client = toolbox_for(box)
    files = toolbox_api.FileSystemApi(client)
    uploaded = strict(files.upload_file(path="workspace/café.txt", file=("café.txt", b"latte")))
    assert (uploaded.name, uploaded.path, uploaded.type) == (
        "café.txt",
        "workspace/café.txt",
        "file",
    )
    # /files/bulk-upload has no body parameters in the generated client: the SDK
    # builds the form itself (daytona _sync/filesystem.py upload_files); so do we.
    _method, url, headers, *_ = files._upload_files_serialize(None, None, None, None)
    headers.pop("Content-Type", None)
    answer = httpx.post(
        url,
        headers=headers,
        data={"files[0].path": "workspace/日本.txt", "files[1].path": "workspace/b.txt"},
        files={
            "files[0].file": ("日本.txt", "こんにちは".encode()),
            "files[1].file": ("b.txt", b"b"),
        },
    )
    result = strict(toolbox_api.UploadFilesResponse.from_dict(answer.json()))
    assert [(f.path, f.bytes) for f in result.files] == [
        ("workspace/日本.txt", 15),
        ("workspace/b.txt", 1),
    ]
    assert files.download_file(path="workspace/b.txt") == b"b"
    assert files.download_file(path="workspace/café.txt") == b"latte"

    raw = files.download_files_without_preload_content(
        toolbox_api.FilesDownloadRequest(
            paths=["workspace/café.txt", "workspace/日本.txt", "workspace/none.txt"]
        )
    )
    # An independent reader (not sandboxes.providers.wire): split on the boundary
    # and decode filename* (RFC 5987) with urllib.
    boundary = raw.headers["Content-Type"].split("boundary=")[1].encode()
    parts = {}
    for chunk in raw.data.split(b"--" + boundary)[1:-1]:
        head, _, payload = chunk.strip(b"\r\n").partition(b"\r\n\r\n")
        disposition = head.decode("latin-1")
        extended = re.search(r"filename\*=utf-8''([^;\r\n]+)", disposition).group(1)
        name = urllib.parse.unquote(extended, encoding="utf-8", errors="strict")
        parts[name] = (re.search(r'name="(\w+)"', disposition).group(1), payload)
    assert raw.headers["Content-Type"] == "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    assert parts["workspace/café.txt"] == ("file", b"latte")
    assert parts["workspace/日本.txt"] == ("file", "こんにちは".encode())
    kind, error_part = parts["workspace/none.txt"]
    assert kind == "error"
    detail = json.loads(error_part)
    assert detail["statusCode"] == 404 and detail["code"] == "FILE_NOT_FOUND"

    process = toolbox_api.ProcessApi(client)
    echo = strict(process.execute_command(toolbox_api.ExecuteRequest(command="echo hi")))
    assert (echo.exit_code, echo.result) == (0, "hi\n")
    hashed = strict(
        process.execute_command(toolbox_api.ExecuteRequest(command=wire.hash_command("workspace")))
    )
    digests = wire.parse_hash_output(hashed.result)
    assert digests["café.txt"].sha256 == hashlib.sha256(b"latte").hexdigest()


@pytest.mark.parametrize("action", ["start_sandbox", "stop_sandbox", "archive_sandbox"])
def test_an_errored_sandbox_answers_400_to_the_official_client(sandboxes, sim, action):
    box = sandboxes.create_sandbox(api.CreateSandbox(name="err"))
    sim.sandbox(box.id, state="error", error_reason="disk full")
    with pytest.raises(api.ApiException) as raised:
        getattr(sandboxes, action)(box.id)
    assert raised.value.status == 400
    assert json.loads(raised.value.body)["message"] == "Sandbox is in an errored state"
    errored = strict(sandboxes.get_sandbox(box.id))
    assert errored.state == api.SandboxState.ERROR and errored.error_reason == "disk full"
    strict(sandboxes.delete_sandbox(box.id))  # errored + desiredState destroyed reads 404
    with pytest.raises(api.ApiException) as gone:
        sandboxes.get_sandbox(box.id)
    assert gone.value.status == 404


@pytest.mark.parametrize(
    ("setup", "action", "status", "message"),
    [
        ("started", "archive_sandbox", 400, "Sandbox is not stopped"),
        ("stopped", "stop_sandbox", 400, "Sandbox is not in a stoppable state"),
        ("archived", "archive_sandbox", 400, "Sandbox is not stopped"),
        ("pending_stop", "stop_sandbox", 409, "Sandbox state change in progress"),
        ("pending_stop", "start_sandbox", 409, "Sandbox state change in progress"),
        ("pending_stop", "delete_sandbox", 409, "Sandbox state change in progress"),
        ("paused", "start_sandbox", 422, "Resuming is not supported for this sandbox"),
        ("creating", "stop_sandbox", 409, "Sandbox state change in progress"),
    ],
)
def test_per_state_refusals_carry_daytonas_messages(sandboxes, sim, setup, action, status, message):
    # sandbox.service.ts start/stop/archive/destroy, in the order they check.
    box = sandboxes.create_sandbox(api.CreateSandbox(name="ref"))
    sim.sandbox(box.id, transition_seconds=5, stuck=True)
    if setup == "pending_stop":
        sandboxes.stop_sandbox(box.id)
    else:
        sim.sandbox(box.id, state=setup)
    with pytest.raises(api.ApiException) as raised:
        getattr(sandboxes, action)(box.id)
    assert raised.value.status == status
    assert json.loads(raised.value.body)["message"] == message


@pytest.mark.parametrize("state", STATES)
def test_every_state_is_reachable_through_a_fault_rule(sandboxes, sim, state):
    box = sandboxes.create_sandbox(api.CreateSandbox(name=f"s-{state}"))
    sim.sandbox(box.id, stuck=True)
    sim.faults(script=[{"operation": "get", "sandbox_id": box.id, "state": state, "times": 1}])
    if state == "destroyed":
        with pytest.raises(api.ApiException) as raised:
            sandboxes.get_sandbox(box.id)
        assert raised.value.status == 404
        return
    read = strict(sandboxes.get_sandbox(box.id))
    assert read.state.value == state
    assert read.desired_state != api.SandboxDesiredState.UNKNOWN_DEFAULT_OPEN_API
    [item] = [i for i in sandboxes.list_sandboxes(name=f"s-{state}").items if i.id == box.id]
    assert strict(item).state.value == state


# --- B. recorded Daytona wire formats through the project's client ------------------------

SID = "7c1d4f0e-2b7a-4c38-9f55-1e2d3c4b5a69"
TOOLBOX = "https://proxy.app.daytona.io/toolbox"
UNICODE_FILES = {"café.txt": b"latte", "日本.txt": "こんにちは".encode(), "plain.txt": b"p"}


def sandbox(state="started", desired=None, name="box", **extra):
    """A `Sandbox` answer as the API sends it (apps/api/src/sandbox/dto/sandbox.dto.ts)."""
    return {
        "id": SID,
        "organizationId": "0f8c3a52-6a55-4b5e-9d29-0a1b2c3d4e5f",
        "name": name,
        "snapshot": "daytonaio/sandbox:0.5.0",
        "user": "daytona",
        "env": {},
        "labels": {"team": "t"},
        "public": False,
        "networkBlockAll": False,
        "kvm": False,
        "target": "us",
        "cpu": 2,
        "gpu": 0,
        "memory": 4,
        "disk": 10,
        "state": state,
        "desiredState": desired or state,
        "backupState": "None",
        "autoStopInterval": 15,
        "autoArchiveInterval": 10080,
        "autoDeleteInterval": -1,
        "volumes": [],
        "createdAt": "2026-11-30T10:00:00.000Z",
        "updatedAt": "2026-11-30T10:00:00.000Z",
        "toolboxProxyUrl": TOOLBOX,
        **extra,
    }


class Replay:
    """A scripted Daytona: `answers(request)` returns an httpx.Response; every
    request is kept for the assertions."""

    def __init__(self, answers):
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.answers(request)

    def client(self, **overrides) -> DaytonaProvider:
        overrides.setdefault("toolbox_hosts", ["proxy.app.daytona.io"])
        client = make_client("https://app.daytona.io/api", **overrides)
        client._http = httpx.Client(transport=httpx.MockTransport(self))
        return client

    def calls(self, method=None, suffix=None):
        return [
            r
            for r in self.requests
            if (method is None or r.method == method)
            and (suffix is None or r.url.path.endswith(suffix))
        ]


def error(status, message):
    # apps/api/src/filters/all-exceptions.filter.ts
    return httpx.Response(
        status,
        json={
            "path": "/api/sandbox",
            "timestamp": "2026-11-30T10:00:00.000Z",
            "statusCode": status,
            "error": {400: "Bad Request", 404: "Not Found", 409: "Conflict"}[status],
            "message": message,
        },
    )


# --- 1. bulk download: part names from filename* ------------------------------------

# What apps/daemon/pkg/toolbox/fs/download_files.go writes for POST /files/bulk-download
# {"paths": ["workspace/café.txt", "workspace/日本.txt", "workspace/gone.txt"]}: Go's
# multipart.Writer with boundary DAYTONA-FILE-BOUNDARY, headers sorted, `filename`
# through toLatin1 (é as the single byte 0xE9, 日本 as "__"), `filename*` through
# encodeRFC5987, and a missing file as a JSON `error` part.
RECORDED_BULK = (
    b"--DAYTONA-FILE-BOUNDARY\r\n"
    b'Content-Disposition: form-data; name="file"; filename="workspace/caf\xe9.txt"; '
    b"filename*=utf-8''workspace%2Fcaf%C3%A9.txt\r\n"
    b"Content-Length: 5\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b"latte"
    b"\r\n--DAYTONA-FILE-BOUNDARY\r\n"
    b'Content-Disposition: form-data; name="file"; filename="workspace/__.txt"; '
    b"filename*=utf-8''workspace%2F%E6%97%A5%E6%9C%AC.txt\r\n"
    b"Content-Length: 15\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n" + "こんにちは".encode() + b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n"
)
RECORDED_MISSING = (
    b"--DAYTONA-FILE-BOUNDARY\r\n"
    b'Content-Disposition: form-data; name="error"; filename="workspace/gone.txt"; '
    b"filename*=utf-8''workspace%2Fgone.txt\r\n"
    b"Content-Type: application/json; charset=utf-8\r\n"
    b"\r\n"
    b'{"statusCode":404,"message":"file not found: workspace/gone.txt",'
    b'"code":"FILE_NOT_FOUND","timestamp":"2026-11-30T10:00:00Z",'
    b'"path":"workspace/gone.txt","method":"POST"}'
    b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n"
)


def toolbox_answers(bulk_body):
    def answers(request):
        if request.url.path.endswith("/files/bulk-download"):
            return httpx.Response(
                200,
                headers={"Content-Type": "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"},
                content=bulk_body,
            )
        if request.url.path.endswith("/process/execute"):
            command = json.loads(request.content)["command"]
            if "paperclip-hash" in command:
                return httpx.Response(
                    200, json={"exitCode": 127, "result": "sha256sum: not found\n"}
                )
            listing = "./café.txt\0./日本.txt\0"
            return httpx.Response(200, json={"exitCode": 0, "result": listing})
        return httpx.Response(200, json=sandbox())

    return answers


def test_open_files_reads_recorded_non_ascii_part_names():
    replay = Replay(toolbox_answers(RECORDED_BULK))
    client = replay.client()
    got = {
        path: b"".join(chunks)
        for path, chunks in client.open_files(SID, "workspace", ["café.txt", "日本.txt"])
    }
    assert got == {"café.txt": b"latte", "日本.txt": "こんにちは".encode()}


def test_the_hash_fallback_reads_recorded_non_ascii_part_names():
    replay = Replay(toolbox_answers(RECORDED_BULK))
    digests = replay.client().hash_files(SID, "workspace")
    assert {p: d.sha256 for p, d in digests.items()} == {
        "café.txt": hashlib.sha256(b"latte").hexdigest(),
        "日本.txt": hashlib.sha256("こんにちは".encode()).hexdigest(),
    }


def test_a_recorded_error_part_is_a_404_naming_the_file_and_code():
    replay = Replay(toolbox_answers(RECORDED_MISSING))
    with pytest.raises(ProviderError) as raised:
        for _path, chunks in replay.client().open_files(SID, "workspace", ["gone.txt"]):
            list(chunks)
    assert raised.value.status_code == 404
    assert "FILE_NOT_FOUND" in str(raised.value) and "gone.txt" in str(raised.value)


def test_non_ascii_names_round_trip_through_the_simulator(daytona, sim):
    box = daytona.create("uni", {}, UNICODE_FILES)
    got = {p: b"".join(c) for p, c in daytona.open_files(box.id, "workspace", list(UNICODE_FILES))}
    assert got == UNICODE_FILES
    sim.sandbox(box.id, no_sha256sum=True)
    digests = daytona.hash_files(box.id, "workspace")
    assert {p: d.sha256 for p, d in digests.items()} == {
        p: hashlib.sha256(data).hexdigest() for p, data in UNICODE_FILES.items()
    }


# --- 2. the skip-last-activity header on every toolbox request ---------------------------


def test_every_request_skips_the_last_activity_update():
    # apps/proxy/pkg/proxy/get_sandbox_target.go: the proxy refreshes last activity
    # unless X-Daytona-Skip-Last-Activity-Update is exactly "true".
    replay = Replay(toolbox_answers(RECORDED_BULK))
    client = replay.client()
    client.hash_files(SID, "workspace")
    list(client.open_files(SID, "workspace", ["café.txt", "日本.txt"]))
    paths = {
        r.url.path.rsplit("/", 2)[-2] + "/" + r.url.path.rsplit("/", 1)[-1] for r in replay.requests
    }
    assert {"process/execute", "files/bulk-download"} <= paths
    assert all(
        r.headers.get("X-Daytona-Skip-Last-Activity-Update") == "true" for r in replay.requests
    )


def test_toolbox_calls_leave_the_sandbox_idle_in_the_simulator(daytona, sim, simulator):
    box = daytona.create("idle", {}, {"a.txt": b"a"})
    before = simulator.sim.sandboxes[box.id].last_activity_at
    sim.reset()
    daytona.hash_files(box.id, "workspace")
    list(daytona.open_files(box.id, "workspace", ["a.txt"]))
    sim.sandbox(box.id, no_sha256sum=True)
    daytona.hash_files(box.id, "workspace")
    calls = sim.calls()
    assert {"execute", "bulk_download"} <= {c["operation"] for c in calls}
    assert all(c["skip_activity"] for c in calls)
    assert simulator.sim.sandboxes[box.id].last_activity_at == before
    # Without the header the simulator's proxy rule does refresh it.
    httpx.post(
        f"{simulator.url}/toolbox/{box.id}/process/execute",
        json={"command": "true"},
        headers={"Authorization": "Bearer test-key"},
    )
    assert simulator.sim.sandboxes[box.id].last_activity_at != before


# --- 3. states and desiredState ---------------------------------------------------------


def test_a_pending_stop_is_waited_for_not_asked_again():
    # sandbox.service.ts stop(): answers with state still `started`, desiredState
    # `stopped`; a second stop would be refused 409 "Sandbox state change in progress".
    reads = iter(["started", "started", "stopping", "stopped"])

    def answers(request):
        if request.method == "POST":
            if len(replay.calls("POST")) > 1:
                return error(409, "Sandbox state change in progress")
            return httpx.Response(200, json=sandbox("started", "stopped"))
        state = next(reads)
        return httpx.Response(200, json=sandbox(state, "stopped"))

    replay = Replay(answers)
    confirmation = replay.client().stop(SID)
    assert confirmation.state == SandboxState.STOPPED
    assert len(replay.calls("POST")) == 1


def test_a_pending_start_is_waited_for_not_asked_again():
    reads = iter(["stopped", "starting", "started"])

    def answers(request):
        if request.method == "POST":
            if len(replay.calls("POST")) > 1:
                return error(409, "Sandbox state change in progress")
            return httpx.Response(200, json=sandbox("stopped", "started"))
        return httpx.Response(200, json=sandbox(next(reads), "started"))

    replay = Replay(answers)
    assert replay.client().start(SID).state == SandboxState.STARTED
    assert len(replay.calls("POST")) == 1


@pytest.mark.parametrize("action", ["start", "stop", "archive"])
def test_an_errored_sandbox_refuses_with_400_and_it_is_not_a_success(action):
    # sandbox.service.ts assertSandboxNotErrored -> SandboxError (400).
    def answers(request):
        if request.method == "POST":
            return error(400, "Sandbox is in an errored state")
        return httpx.Response(200, json=sandbox("error", "started", errorReason="disk full"))

    replay = Replay(answers)
    with pytest.raises(ProviderError) as raised:
        getattr(replay.client(), action)(SID)
    assert not raised.value.transient and raised.value.status_code == 400
    assert "'error'" in str(raised.value) and "disk full" in str(raised.value)
    assert len(replay.calls("POST")) == 1


@pytest.mark.parametrize("action", ["start", "stop", "archive"])
def test_an_errored_sandbox_in_the_simulator_is_refused(daytona, sim, action):
    box = daytona.create("err", {})
    sim.sandbox(box.id, state="error", error_reason="disk full")
    with pytest.raises(ProviderError) as raised:
        getattr(daytona, action)(box.id)
    assert not raised.value.transient
    [post] = sim.calls(method="POST", operation=action)
    assert post["status"] == 400


def test_destroy_is_soft_and_confirmed_by_id_never_by_name():
    # sandbox.service.ts destroy() + Sandbox.getSoftDeleteUpdate: renamed at once,
    # so a read by the old name answers 404 while the sandbox still exists.
    reads = iter(["started", "destroying", "destroying"])

    def answers(request):
        path = request.url.path
        if request.method == "DELETE":
            return httpx.Response(
                200, json=sandbox("started", "destroyed", name="DESTROYED_warm-1_1764496800000")
            )
        if path.endswith("/warm-1"):
            return error(404, "Sandbox with ID or name warm-1 not found")
        state = next(reads, None)
        if state is None:
            return error(404, f"Sandbox with ID or name {SID} not found")
        return httpx.Response(200, json=sandbox(state, "destroyed", name="DESTROYED_warm-1_1"))

    replay = Replay(answers)
    confirmation = replay.client().destroy("warm-1")
    assert confirmation.state == SandboxState.DESTROYED and confirmation.sandbox_id == SID
    reads_after = replay.calls("GET")
    assert len(reads_after) == 4 and all(r.url.path.endswith(SID) for r in reads_after)
    assert len(replay.calls("DELETE")) == 1


def test_a_pending_delete_is_waited_for_not_deleted_again():
    # A worker's DELETE was received but its answer lost: the next DELETE is 409
    # (sandbox.pending) and the read shows desiredState `destroyed`.
    reads = iter(["stopped", "destroying"])

    def answers(request):
        if request.method == "DELETE":
            return error(409, "Sandbox state change in progress")
        state = next(reads, None)
        if state is None:
            return error(404, "not found")
        return httpx.Response(200, json=sandbox(state, "destroyed"))

    replay = Replay(answers)
    assert replay.client().destroy(SID).state == SandboxState.DESTROYED
    assert len(replay.calls("DELETE")) == 1


def test_a_soft_deleted_sandbox_reads_destroying_whatever_its_state():
    replay = Replay(lambda request: httpx.Response(200, json=sandbox("stopped", "destroyed")))
    info = replay.client().get(SID)
    assert info.state == SandboxState.DESTROYING and info.pending
    assert info.raw["state"] == "stopped" and info.desired_state == "destroyed"


def test_the_request_timeout_outlasts_the_servers_start_wait():
    # sandbox.controller.ts startSandbox -> waitForSandboxStarted(sandbox, 30).
    assert SERVER_START_WAIT_SECONDS == 30
    client = DaytonaProvider("https://app.daytona.io/api", api_key="k")
    assert client.request_timeout > SERVER_START_WAIT_SECONDS
    client.close()


def test_a_start_the_server_holds_is_one_post_without_409s(simulator, sim):
    client = make_client(simulator.url, budget_seconds=5)
    box = client.create("slow", {})
    client.stop(box.id)
    sim.sandbox(box.id, transition_seconds=0.6)
    sim.reset()
    assert client.start(box.id).state == SandboxState.STARTED
    posts = sim.calls(method="POST", operation="start")
    assert [c["status"] for c in posts] == [200]
    assert not [c for c in sim.calls() if c["status"] == 409]


def test_file_access_waits_out_a_pending_stop_then_starts(daytona, sim):
    box = daytona.create("racing", {}, {"a.txt": b"a"})
    sim.sandbox(box.id, transition_seconds=0.3)
    httpx.post(
        f"{daytona.api_url}/sandbox/{box.id}/stop", headers={"Authorization": "Bearer test-key"}
    )
    sim.reset()
    assert daytona.hash_files(box.id, "workspace")["a.txt"].size == 1
    assert [c["status"] for c in sim.calls(operation="execute")] == [200]
    time.sleep(0.4)  # the stop, had it been left pending, would have landed by now
    assert daytona.get(box.id).state == SandboxState.STARTED


def test_resources_reach_the_provider_protocol(daytona, sim):
    box = daytona.create("sized", {})
    sim.sandbox(box.id, cpu=4, memory=8, disk=20)
    resources = daytona.get(box.id).resources
    assert resources.as_payload() == {"cpu": 4, "memory_gib": 8, "disk_gib": 20, "gpu": 0}
    [listed] = [s for s in daytona.list() if s.id == box.id]
    assert listed.resources == resources


# --- 4. uploads through upload-v2 / bulk-upload ----------------------------------------------


def test_seeding_uploads_through_bulk_upload(daytona, sim):
    box = daytona.create("bulk", {}, UNICODE_FILES)
    uploads = sim.calls(operation="upload") + sim.calls(operation="bulk_upload")
    assert [c["path"].rsplit("/", 1)[-1] for c in uploads] == ["bulk-upload"]
    got = {p: b"".join(c) for p, c in daytona.open_files(box.id, "workspace", list(UNICODE_FILES))}
    assert got == UNICODE_FILES


def test_the_recorded_bulk_upload_form_is_what_the_daemon_reads():
    # apps/daemon/pkg/toolbox/fs/upload_files.go: `files[i].path` before `files[i].file`.
    def answers(request):
        if request.url.path.endswith("/files/bulk-upload"):
            return httpx.Response(200, json={"files": [{"path": "workspace/café.txt", "bytes": 5}]})
        if request.method == "POST" and request.url.path.endswith("/sandbox"):
            return httpx.Response(200, json=sandbox())
        return httpx.Response(200, json=sandbox())

    replay = Replay(answers)
    replay.client().create("box", {}, {"café.txt": b"latte"})
    [upload] = replay.calls("POST", "/files/bulk-upload")
    body = upload.content
    assert body.index(b'name="files[0].path"') < body.index(b'name="files[0].file"')
    assert "workspace/café.txt".encode() in body and b"latte" in body


def test_uploads_fall_back_to_the_legacy_route_on_an_old_toolbox(daytona, sim):
    sim.faults(legacy_toolbox=True)
    box = daytona.create("old", {}, {"a.txt": b"a", "b.txt": b"b"})
    routes = [c["path"].rsplit("/", 1)[-1] for c in sim.calls() if "/files/" in c["path"]]
    assert routes[:3] == ["bulk-upload", "upload-v2", "upload"]
    assert routes.count("bulk-upload") == 1 and routes.count("upload-v2") == 1
    got = {p: b"".join(c) for p, c in daytona.open_files(box.id, "workspace", ["a.txt", "b.txt"])}
    assert got == {"a.txt": b"a", "b.txt": b"b"}
