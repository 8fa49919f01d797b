"""Fixtures for reconciler tests: real local sandboxes with files, a provider spy,
and graph builders in the seeds' shapes."""

import threading
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.providers.local import LocalProvider
from sandboxes.reconciler import signals
from sandboxes.reconciler.passes import run_pass
from sandboxes.reconciler.plan import Action, Plan
from sandboxes.reconciler.steps import retire_sandbox
from sandboxes.reconciler.worker import Worker
from tests import factories as f

from .world import provider, world, world_factory  # noqa: F401  (end-to-end fixtures)

SAVED = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n", "old.txt": b"old\n"}


class Spy:
    """Delegates to a provider and records every call (operation, sandbox id)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __getattr__(self, attr):
        target = getattr(self.inner, attr)
        if not callable(target):
            return target

        def call(*args, **kwargs):
            with self._lock:
                self.calls.append((attr, args[0] if args else ""))
            return target(*args, **kwargs)

        return call

    def count(self, operation, sandbox_id=None):
        return sum(1 for op, sid in self.calls if op == operation and (sandbox_id in (None, sid)))


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    """Attachments are content-addressed: each test gets an empty store."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def local(tmp_path):
    return Spy(LocalProvider(root=tmp_path / "sandboxes", budget_seconds=5))


@pytest.fixture
def reconcile(local):
    def run(**kwargs):
        kwargs.setdefault("provider_for", lambda env: local)
        return run_pass(**kwargs)

    return run


@pytest.fixture
def at_checkpoint():
    """Observe the steps' checkpoints through their signal (signals.checkpoint),
    as a harness does: `at_checkpoint(act)` calls act(name) at each one, until
    the `off()` it returns is called or the test ends. An act that raises is
    the worker dying there."""
    receivers = []

    def connect(act):
        def receiver(sender, name, **kwargs):
            act(name)

        signals.checkpoint.connect(receiver, weak=False)
        receivers.append(receiver)
        return lambda: signals.checkpoint.disconnect(receiver)

    yield connect
    for receiver in receivers:
        signals.checkpoint.disconnect(receiver)


@pytest.fixture
def sandbox(local):
    """Create a real local sandbox holding `files`; returns its id. Stopped by default."""

    def make(files=None, *, stopped=True):
        info = local.inner.create(
            "test", {"test": "1"}, files=dict(SAVED if files is None else files)
        )
        if stopped:
            local.inner.stop(info.id)
        return info.id

    return make


@pytest.fixture
def warm(sandbox):
    """A released, stopped warm lease (reuse_by_environment) on a real sandbox, with
    its saved manifest matching the sandbox; kwargs go to the lease factory."""

    def make(*, files=None, receipt=True, env=None, stopped=True, **kwargs):
        sid = sandbox(files, stopped=stopped)
        kwargs.setdefault("environment", env or f.EnvironmentFactory())
        lease = f.EnvironmentLeaseFactory(
            provider_lease_id=sid,
            execution_workspace__saved_manifest=f.manifest_for(SAVED),
            **kwargs,
        )
        if receipt:
            f.stop_receipt(lease)
        return lease

    return make


def retirement_of(lease):
    return (
        m.Retirement.objects.filter(provider_lease_id=lease.provider_lease_id)
        .order_by("listed_at")
        .last()
    )


def ago(**kw):
    return timezone.now() - timedelta(**kw)


def claim(r):
    """Claim the record as a worker does (a fresh attempt id, five minutes); the
    attempt id, which fences every step taken under the claim."""
    attempt = uuid.uuid4()
    m.Retirement.objects.filter(pk=r.pk).update(
        attempt_id=attempt, claimed_until=timezone.now() + timedelta(minutes=5)
    )
    return attempt


def retire(r, local):
    """Call the one destroy path directly, as a worker whose plan said `retire`
    (claimed afresh, over `local`); `r` is refreshed before and after."""
    r.refresh_from_db()
    plan = Plan(Action.RETIRE, r.pk, r.environment, r.provider_lease_id)
    retire_sandbox(plan, claim(r), Worker(provider_for=lambda e: local))
    r.refresh_from_db()
