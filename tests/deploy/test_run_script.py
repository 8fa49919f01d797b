"""The README's first command (`make run`, i.e. bin/run) stops when told to.

bin/run starts the django-q2 cluster and the web server. A service manager or
`timeout` sends SIGTERM to the script; a terminal's Ctrl-C sends SIGINT to its
whole foreground process group. Either way the script must exit promptly and
leave no server, cluster or worker behind (a stray cluster keeps running
reconciler passes against the demo database).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from .helpers import _SCRUB, ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(var_dir: Path) -> list[int]:
    """Live processes started for this run (they carry its CONSOLE_VAR_DIR)."""
    marker = f"CONSOLE_VAR_DIR={var_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, PermissionError, ProcessLookupError, IndexError):
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


class _Run:
    def __init__(self, var_dir: Path):
        self.var_dir = var_dir
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if k not in (*_SCRUB, "CONSOLE_BASE_URL")}
        env.update(
            DJANGO_SETTINGS_MODULE="paperclip_console.settings",  # not the tests' settings
            CONSOLE_VAR_DIR=str(var_dir),
            PORT=str(self.port),
            DEBUG="1",
            STOP_GRACE="20",
        )
        self.proc = subprocess.Popen(
            [str(ROOT / "bin" / "run")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group, as a terminal gives it
        )
        self.output: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def environ_of_server(self) -> dict[str, str]:
        """The environment bin/run gave its web server (a live process of this run)."""
        for pid in _processes_of(self.var_dir):
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"runserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        raise AssertionError("no runserver process")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            if "Open:" in line:
                self.ready.set()

    def wait_until_serving(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.5):
            assert self.proc.poll() is None, "".join(self.output)
            assert time.monotonic() < deadline, "".join(self.output)
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{self.port}/accounts/login/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "".join(self.output)
                time.sleep(0.3)
        assert page.status_code == 200


@pytest.mark.parametrize(
    ("how", "expected_rc"),
    [
        # `timeout`, `kill` and service managers signal the script alone.
        (lambda proc: proc.send_signal(signal.SIGTERM), 143),
        # A terminal's Ctrl-C reaches the whole foreground group.
        (lambda proc: os.killpg(proc.pid, signal.SIGINT), 130),
    ],
    ids=["sigterm", "ctrl-c"],
)
def test_run_stops_server_and_cluster_on_a_signal(tmp_path, how, expected_rc):
    var_dir = tmp_path / "var"
    run = _Run(var_dir)
    try:
        run.wait_until_serving()
        assert len(_processes_of(var_dir)) >= 3  # script, server, cluster (+ workers)
        how(run.proc)
        rc = run.proc.wait(timeout=45)
        assert rc == expected_rc, "".join(run.output)
        deadline = time.monotonic() + 10
        while _processes_of(var_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_of(var_dir) == []
        assert (var_dir / "qcluster.log").exists()  # the log went to the var dir it was given
    finally:
        for pid in _processes_of(var_dir):
            os.kill(pid, signal.SIGKILL)
        if run.proc.poll() is None:
            run.proc.kill()


# What a terminal shows after Ctrl-C must be nothing but what ran: no Python
# traceback, no "Terminated" from the shell, from runserver or the cluster.
NOISE = ("Traceback", "KeyboardInterrupt", "Terminated", "Killed", "Error", "unbound variable")


def test_ctrl_c_ends_quietly_and_the_base_url_follows_the_port(tmp_path):
    var_dir = tmp_path / "var"
    run = _Run(var_dir)
    try:
        run.wait_until_serving()
        assert run.environ_of_server()["CONSOLE_BASE_URL"] == f"http://127.0.0.1:{run.port}"
        assert f"Open:    http://127.0.0.1:{run.port}/" in "".join(run.output)
        served = len(run.output)
        os.killpg(run.proc.pid, signal.SIGINT)
        assert run.proc.wait(timeout=45) == 130
        time.sleep(0.5)  # the reader thread drains the pipe
        after = "".join(run.output[served:])
        assert not [word for word in NOISE if word in after], after
    finally:
        for pid in _processes_of(var_dir):
            os.kill(pid, signal.SIGKILL)
        if run.proc.poll() is None:
            run.proc.kill()


@pytest.mark.parametrize("after_seconds", [2.0, 6.0])
def test_ctrl_c_during_setup_ends_quietly(tmp_path, after_seconds):
    """Ctrl-C while bin/run migrates or loads the demo fleet: no traceback."""
    var_dir = tmp_path / "var"
    run = _Run(var_dir)
    try:
        time.sleep(after_seconds)
        os.killpg(run.proc.pid, signal.SIGINT)
        rc = run.proc.wait(timeout=45)
        time.sleep(0.5)
        out = "".join(run.output)
        assert rc == 130, out
        assert not [word for word in NOISE if word in out], out
    finally:
        for pid in _processes_of(var_dir):
            os.kill(pid, signal.SIGKILL)
        if run.proc.poll() is None:
            run.proc.kill()
