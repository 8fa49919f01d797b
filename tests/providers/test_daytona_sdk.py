"""Daytona's own Python SDK (`daytona`, PyPI) runs its basic flow against
`manage.py provider_simulator`: create, exec, upload, download, stop, start,
get, list, delete.

The SDK is heavy (aiohttp, OpenTelemetry, socket.io), so it is not in the dev
extras: `pip install -e '.[dev,sdk]'` brings it. Without it this module skips.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

daytona = pytest.importorskip("daytona")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sdk-test-key"


@pytest.fixture
def simulator_url():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings"}
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "provider_simulator",
            "--port",
            "0",
            "--api-key",
            KEY,
            "--transition-seconds",
            "0.05",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "listening on" in line, line
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_daytona_sdk_basic_flow_runs_against_the_simulator(simulator_url):
    client = daytona.Daytona(daytona.DaytonaConfig(api_key=KEY, api_url=simulator_url, target="us"))
    sandbox = client.create(timeout=30)
    assert sandbox.state == daytona.SandboxState.STARTED
    assert (sandbox.cpu, sandbox.memory, sandbox.disk) == (1, 1, 3)

    answer = sandbox.process.exec("echo hello")
    assert (answer.exit_code, answer.result) == (0, "hello\n")

    sandbox.fs.upload_file(b"latte", "workspace/café.txt")
    sandbox.fs.upload_file("こんにちは".encode(), "workspace/日本.txt")
    assert sandbox.fs.download_file("workspace/café.txt") == b"latte"
    assert sandbox.fs.download_file("workspace/日本.txt") == "こんにちは".encode()

    sandbox.stop()
    assert sandbox.state == daytona.SandboxState.STOPPED
    sandbox.start()
    assert sandbox.state == daytona.SandboxState.STARTED
    assert client.get(sandbox.id).state == daytona.SandboxState.STARTED
    assert sandbox.id in [s.id for s in client.list()]

    client.delete(sandbox, timeout=30, wait=True)
    with pytest.raises(daytona.DaytonaError):
        client.get(sandbox.id)
