"""Whether a pass is alive: its heartbeat, and the sweep that marks a pass whose
worker is gone as interrupted (docs/rules.md, claims and failures).

A pass beats - one UPDATE of its `last_seen_at` - after its listing and at most
every HEARTBEAT_SECONDS while it claims records. At the start of every pass,
each running pass that has not beaten for a claim's length is interrupted (it
has lost every claim it held), and so, at once, is one whose worker ran on this
host as a process that no longer exists (the cluster restarted, the worker was
killed). A process on another host cannot be seen from here: there the
heartbeat decides. A pass found interrupted that beats again was only stalled,
and is running again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from sandboxes.models import ReconcilerPass
from sandboxes.models.console import PASS_SILENT_AFTER

from . import claims

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30.0
# A process that started this much later than a pass is not its worker, whatever
# its pid; the margin covers /proc's whole-second boot time.
START_MARGIN = timedelta(seconds=5)
# Linux's largest pid_max; anything above is not a pid.
MAX_PID = 4_194_304


def worker_name() -> str:
    """Who runs a pass: host and process, so the sweep can tell a dead one."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Heartbeat:
    """One pass's beat: `beat()` writes at most once every `every` seconds."""

    def __init__(self, pass_id, every: float = HEARTBEAT_SECONDS):
        self.pass_id = pass_id
        self.every = every
        self._last = time.monotonic()

    def beat(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last < self.every:
            return
        self._last = time.monotonic()
        try:
            ReconcilerPass.objects.filter(pk=self.pass_id, finished_at__isnull=True).update(
                last_seen_at=timezone.now(), interrupted_at=None
            )
        except claims.DB_LOST as exc:
            # The next claim reconnects; a missed beat only ages the pass.
            log.warning("heartbeat: database connection lost: %s", exc)
            claims.reset_connection()


def interrupt_gone(now: datetime | None = None) -> int:
    """Mark every running pass whose worker is gone as interrupted, keeping
    when it was last seen; returns how many were marked. One read of the few
    running passes; a write only when one is gone."""
    now = now or timezone.now()
    cutoff = now - PASS_SILENT_AFTER
    here = f"{socket.gethostname()}:"
    running = ReconcilerPass.objects.running()
    silent, dead = [], []
    for pk, worker, started, seen in running.values_list(
        "pk", "worker", "started_at", "last_seen_at"
    ):
        if (seen or started) < cutoff:
            silent.append(pk)
        elif worker.startswith(here) and process_gone(worker[len(here) :], started):
            dead.append(pk)
    if not silent and not dead:
        return 0
    # A silent pass that beat since it was read is alive after all: left running.
    gone = running.filter(pk__in=silent).silent_since(cutoff) | running.filter(pk__in=dead)
    n = gone.update(interrupted_at=now, last_seen_at=Coalesce(F("last_seen_at"), F("started_at")))
    log.warning("%s unfinished pass(es) marked interrupted: their worker is gone", n)
    return n


def process_gone(pid_text: str, started_at: datetime) -> bool:
    """True only when sure the pass's worker process on this host is gone: no
    process holds its pid, it is a zombie, or the one holding it started after
    the pass did (a pid reused after a restart)."""
    if not (pid_text.isascii() and pid_text.isdigit()) or not 0 < int(pid_text) <= MAX_PID:
        return False  # not a pid we wrote (kill(0) would even signal our group)
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user's process
    stat = _proc_stat(pid)
    if stat is None:
        return False  # no /proc to tell by: the heartbeat decides
    state, began = stat
    return state == "Z" or began > started_at + START_MARGIN


def _proc_stat(pid: int) -> tuple[str, datetime] | None:
    """A process's state and start time from /proc (Linux), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        # Fields after the command name, which may hold spaces and parentheses:
        # state is field 3 of proc(5), starttime (clock ticks after boot) field 22.
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[19])
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return fields[0], datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"), UTC)
