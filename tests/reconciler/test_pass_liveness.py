"""A pass whose worker is gone is `interrupted`, with the time it was last seen:
a pass beats (last_seen_at) as it works; the next pass marks every pass that
has not beaten for a claim's length, or whose process on this host no longer
exists, as interrupted; a pass that still beats is left alone.

The last test kills a real `manage.py reconcile --once` with SIGKILL in the
middle of its pass."""

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler import signals
from sandboxes.reconciler.claims import CLAIM_SECONDS
from tests import factories as f

from .conftest import ago

ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()


def running_pass(**kwargs) -> m.ReconcilerPass:
    kwargs.setdefault("started_at", ago(minutes=1))
    kwargs.setdefault("last_seen_at", kwargs["started_at"])
    kwargs.setdefault("worker", "another-host:4242")
    return m.ReconcilerPass.objects.create(**kwargs)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.django_db
def test_a_pass_silent_past_a_claims_length_is_interrupted_by_the_next_pass(reconcile):
    seen = ago(seconds=CLAIM_SECONDS + 60)
    silent = running_pass(started_at=seen - timedelta(minutes=5), last_seen_at=seen)
    new = reconcile()
    silent.refresh_from_db()
    assert silent.interrupted_at is not None
    assert new.started_at <= silent.interrupted_at <= new.finished_at
    assert silent.last_seen_at == seen  # when it was last seen, kept
    assert silent.finished_at is None  # it never finished: metrics and notices agree
    assert silent.status == "interrupted"
    new.refresh_from_db()
    assert new.status == "finished" and new.interrupted_at is None


@pytest.mark.django_db
def test_a_pass_that_still_beats_is_left_alone(reconcile):
    # Started long ago, but its worker beat a minute ago: a long pass, alive.
    alive = running_pass(started_at=ago(hours=2), last_seen_at=ago(minutes=1))
    reconcile()
    alive.refresh_from_db()
    assert alive.interrupted_at is None
    assert alive.status == "running"


@pytest.mark.slow
@pytest.mark.django_db
def test_a_pass_of_a_process_gone_from_this_host_is_interrupted_at_once(reconcile):
    """The cluster restarted: its worker's process is gone, though the pass
    beat a moment ago; no need to wait a claim's length."""
    gone = running_pass(worker=f"{HOST}:{dead_pid()}", last_seen_at=ago(seconds=5))
    reconcile()
    gone.refresh_from_db()
    assert gone.interrupted_at is not None
    assert gone.last_seen_at < gone.interrupted_at


@pytest.mark.slow
@pytest.mark.django_db
def test_a_pass_of_a_live_process_on_this_host_is_left_alone(reconcile):
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        alive = running_pass(worker=f"{HOST}:{worker.pid}", started_at=timezone.now())
        reconcile()
        alive.refresh_from_db()
        assert alive.interrupted_at is None
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.django_db
def test_a_pid_now_held_by_a_younger_process_is_not_the_pass_worker(reconcile):
    """After a restart the pid may be reused (in a container, by the same
    small number): a process that started after the pass cannot be its worker."""
    me = f"{HOST}:{os.getpid()}"
    before_me = running_pass(worker=me, started_at=ago(days=3), last_seen_at=ago(minutes=2))
    mine = running_pass(worker=me, started_at=timezone.now(), last_seen_at=timezone.now())
    reconcile()
    before_me.refresh_from_db()
    mine.refresh_from_db()
    assert before_me.interrupted_at is not None
    assert mine.interrupted_at is None


@pytest.mark.django_db
def test_finished_passes_and_other_names_are_never_interrupted(reconcile):
    finished = f.ReconcilerPassFactory(started_at=ago(days=1), finished_at=ago(days=1))
    named = running_pass(worker="chaos-worker-3", last_seen_at=ago(seconds=30))
    reconcile()
    finished.refresh_from_db()
    named.refresh_from_db()
    assert finished.interrupted_at is None and finished.status == "finished"
    assert named.interrupted_at is None


@pytest.mark.django_db
def test_a_pass_beats_as_it_works(warm, reconcile):
    """Between its start and the first record it claims, the pass has beaten
    (after the listing); a finished pass was last seen when it finished."""
    warm(issue__status=m.IssueStatus.DONE, released_at=ago(days=2))
    at_claim = []

    def note(sender, claim, **kwargs):
        row = m.ReconcilerPass.objects.filter(finished_at__isnull=True).get()
        at_claim.append((row.started_at, row.last_seen_at))

    signals.claimed.connect(note)
    try:
        done = reconcile()
    finally:
        signals.claimed.disconnect(note)
    assert at_claim, "the pass claimed nothing"
    started, seen = at_claim[0]
    assert seen > started
    done.refresh_from_db()
    assert done.last_seen_at == done.finished_at


@pytest.mark.django_db
def test_a_pass_marked_interrupted_that_beats_again_is_running(reconcile):
    """A worker stalled past a claim's length (a slow provider) but alive: its
    next beat says so, and its finish stands."""
    from sandboxes.reconciler.liveness import Heartbeat, interrupt_gone

    seen = ago(seconds=CLAIM_SECONDS + 1)
    stalled = running_pass(started_at=seen, last_seen_at=seen)
    assert interrupt_gone() == 1
    Heartbeat(stalled.pk).beat(force=True)
    stalled.refresh_from_db()
    assert stalled.interrupted_at is None
    assert stalled.last_seen_at > seen
    assert stalled.status == "running"


# --- a real worker, killed ---------------------------------------------------------


def _locks_waited(dbname: str) -> int:
    with psycopg.connect(dbname="postgres", user="postgres", host="127.0.0.1") as c:
        return c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [dbname],
        ).fetchone()[0]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_pass_leaves_an_interrupted_pass(reconcile, client):
    """`manage.py reconcile --once` is held mid-pass (its listing waits on a
    table lock this test holds), then killed with SIGKILL; the next pass marks
    the dead pass interrupted, and /passes/ says when it was last seen."""
    s = connection.settings_dict
    url = f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings",
    }
    env.pop("REDIS_URL", None)
    lock = psycopg.connect(url.replace("postgres://", "postgresql://"))
    lock.execute(f"LOCK TABLE {m.Retirement._meta.db_table} IN ACCESS EXCLUSIVE MODE")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "reconcile", "--once"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            started = m.ReconcilerPass.objects.filter(worker=f"{HOST}:{proc.pid}").first()
            if started is not None and _locks_waited(s["NAME"]):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the pass never reached the listing")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lock.close()  # the killed pass's backend goes with its client
    killed = m.ReconcilerPass.objects.get(pk=started.pk)
    assert killed.finished_at is None and killed.interrupted_at is None  # "running", on main

    reconcile()
    killed.refresh_from_db()
    assert killed.interrupted_at is not None
    assert killed.last_seen_at is not None and killed.last_seen_at < killed.interrupted_at
    assert killed.finished_at is None

    viewer = f.UserFactory(groups=["reviewers"])
    client.force_login(viewer)
    body = client.get(reverse("passes")).content.decode()
    assert "interrupted, last seen" in body
    assert timezone.localtime(killed.last_seen_at).strftime("%Y-%m-%d %H:%M:%S") in body
