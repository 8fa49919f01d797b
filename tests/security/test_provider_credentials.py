"""The provider's API key goes only to the hosts configured for it (issue 13, item 5).

A sandbox's `toolboxProxyUrl` comes from the provider's answer. Daytona's cloud
answers `https://proxy.app.daytona.io/toolbox` (daytonaio/daytona,
apps/api/src/sandbox/dto/toolbox-proxy-url.dto.ts) for an API at
app.daytona.io, so the toolbox host legitimately differs from the API's — but a
compromised or spoofed answer could name any host. Only the API's own origin
and the hosts an environment allowlists may receive the key."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from devtools.simulator import HOME, FaultConfig, SimulatorServer
from sandboxes import models as m
from sandboxes.providers import reset_providers
from sandboxes.providers.base import UnsafePath
from sandboxes.providers.daytona import UntrustedHost, trusted_origins
from sandboxes.reconciler.passes import run_pass
from tests import factories as f
from tests.providers.conftest import API_KEY, make_client


@pytest.fixture
def simulator():
    with SimulatorServer(
        seed=7, config=FaultConfig(transition_seconds=0.02), api_key=API_KEY
    ) as srv:
        yield srv


class _Catcher(BaseHTTPRequestHandler):
    def _any(self):
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _any

    def log_message(self, *args):
        pass


@pytest.fixture
def stranger():
    """Another HTTP server on loopback (another port: another origin) that
    records every request it receives, with its Authorization header."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Catcher)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _seed(simulator, name="kept"):
    sid = simulator.sim.create({"name": name})["id"]
    sb = simulator.sim.sandboxes[sid]
    sb.dirs.add(f"{HOME}/workspace")
    sb.files[f"{HOME}/workspace/README.md"] = b"# task\n"
    return sid


def test_a_toolbox_on_another_host_never_receives_the_key(simulator, stranger):
    server, url = stranger
    sid = _seed(simulator)
    simulator.sim.base_url = url  # the provider now answers toolboxProxyUrl=<stranger>/toolbox
    client = make_client(simulator.url)
    try:
        with pytest.raises(UntrustedHost) as caught:
            client.hash_files(sid, "workspace")
    finally:
        client.close()
    assert server.seen == []
    assert url.removeprefix("http://") in str(caught.value)
    assert "toolbox hosts" in str(caught.value)


@pytest.mark.slow
def test_an_allowlisted_toolbox_host_does_receive_it(simulator, stranger):
    server, url = stranger
    sid = _seed(simulator)
    simulator.sim.base_url = url
    client = make_client(simulator.url, toolbox_hosts=[url], budget_seconds=1)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the stranger answers 500
            client.hash_files(sid, "workspace")
    finally:
        client.close()
    assert server.seen and all(auth == f"Bearer {API_KEY}" for _, _, auth in server.seen)


def test_origins_compare_scheme_host_and_port():
    origins = trusted_origins("https://app.daytona.io/api", ["proxy.app.daytona.io"])
    assert origins == {"https://app.daytona.io:443", "https://proxy.app.daytona.io:443"}
    # http to the same host is another origin: the key would travel in clear.
    assert "http://proxy.app.daytona.io:80" not in origins
    assert trusted_origins("http://127.0.0.1:9/api", ["http://127.0.0.1:10"]) == {
        "http://127.0.0.1:9",
        "http://127.0.0.1:10",
    }


@pytest.mark.django_db
def test_the_reconciler_records_the_refusal_on_the_retirement(
    simulator, stranger, monkeypatch, settings, tmp_path
):
    """Through the environment's own settings (no test client injected): the
    refusal is the record's error, and the stranger hears nothing."""
    server, url = stranger
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PROVIDER_STEP_BUDGET_SECONDS = 5
    monkeypatch.setenv("SIM_TOOLBOX_KEY", API_KEY)
    settings.PROVIDER_API_KEY_VARIABLES = ["SIM_TOOLBOX_KEY"]
    reset_providers()
    env = f.EnvironmentFactory(
        provider="daytona",
        api_url=simulator.url,
        api_key_env="SIM_TOOLBOX_KEY",
        retirement_mode="auto",
    )
    sid = _seed(simulator)
    simulator.sim.sandboxes[sid].state = "stopped"
    lease = f.EnvironmentLeaseFactory(
        environment=env,
        provider="daytona",
        provider_lease_id=sid,
        status=m.LeaseStatus.FAILED,
        execution_workspace__saved_manifest=f.manifest_for({"README.md": b"# task\n"}),
    )
    f.stop_receipt(lease)
    simulator.sim.base_url = url
    try:
        run_pass(worker="t")
    finally:
        reset_providers()
    r = m.Retirement.objects.get(provider_lease_id=sid)
    assert "UntrustedHost" in r.last_error and "refused to send the API key" in r.last_error
    assert r.stage == m.Stage.FAILED
    assert server.seen == []


# --- ids that are not one path segment (issue 13, item 6) ---------------------------


@pytest.mark.parametrize("bad", ["", ".", ".."])
@pytest.mark.parametrize("operation", ["get", "stop", "destroy"])
def test_dot_ids_are_refused_before_any_request(simulator, bad, operation):
    """Regression: GET /sandbox/.. is normalised to GET /, whose 404 read as
    "destroyed" — a `..` record was dismissed as gone."""
    client = make_client(simulator.url)
    simulator.sim.calls.clear()
    try:
        with pytest.raises(UnsafePath):
            getattr(client, operation)(bad)
    finally:
        client.close()
    assert list(simulator.sim.calls) == []
