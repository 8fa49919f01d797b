"""reconcile, setup_schedules and the django-q2 task."""

import io

import pytest
from django.core.management import CommandError, call_command
from django_q.models import Schedule

from sandboxes import models as m
from sandboxes.providers.base import TransientProviderError
from sandboxes.reconciler import tasks
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def use_local(local, monkeypatch):
    monkeypatch.setattr(
        "sandboxes.reconciler.worker.default_provider_for", lambda env, name="": local
    )
    return local


def test_reconcile_once_exits_zero_even_when_a_candidate_failed(warm, use_local, monkeypatch):
    ok = warm(status=m.LeaseStatus.FAILED)
    bad = warm(status=m.LeaseStatus.FAILED)
    real = use_local.inner.hash_files

    def flaky(sandbox_id, root, **kw):
        if sandbox_id == bad.provider_lease_id:
            raise TransientProviderError("503")
        return real(sandbox_id, root, **kw)

    monkeypatch.setattr(use_local.inner, "hash_files", flaky)
    out = io.StringIO()
    call_command("reconcile", "--once", stdout=out)
    assert "2 candidates, 1 retired, 1 failed (will retry)" in out.getvalue()
    assert m.Retirement.objects.get(lease=ok).stage == m.Stage.RETIRED
    assert m.Retirement.objects.get(lease=bad).stage == m.Stage.FAILED
    assert m.ReconcilerPass.objects.count() == 1


def test_reconcile_dry_run_changes_nothing(warm, use_local):
    warm(status=m.LeaseStatus.FAILED)
    out = io.StringIO()
    call_command("reconcile", "--dry-run", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("would list local:") and "abandoned_warm: listed" in lines[0]
    assert lines[1].startswith("dry run: nothing written")
    assert not m.Retirement.objects.exists()
    assert not m.ReconcilerPass.objects.exists()
    assert use_local.calls == []


def test_reconcile_one_environment(warm, use_local):
    env = f.EnvironmentFactory(name="only-me")
    mine = warm(env=env, status=m.LeaseStatus.FAILED)
    other = warm(status=m.LeaseStatus.FAILED)
    call_command("reconcile", "--once", "--environment", "only-me", stdout=io.StringIO())
    assert m.Retirement.objects.get(lease=mine).stage == m.Stage.RETIRED
    assert not m.Retirement.objects.filter(lease=other).exists()
    with pytest.raises(CommandError):
        call_command("reconcile", "--once", "--environment", "nope")


def test_setup_schedules_is_idempotent_by_name(settings):
    call_command("setup_schedules", stdout=io.StringIO())
    call_command("setup_schedules", "--minutes", "2", stdout=io.StringIO())
    schedule = Schedule.objects.get(name="reconciler pass")
    assert schedule.func == "sandboxes.reconciler.tasks.reconcile_pass"
    assert schedule.minutes == 2 and schedule.repeats == -1
    sweep = Schedule.objects.get(name="notifications sweep")
    assert sweep.func == "sandboxes.notifications.tasks.sweep" and sweep.repeats == -1
    assert Schedule.objects.count() == 2
    assert settings.Q_CLUSTER["retry"] > settings.Q_CLUSTER["timeout"]
    assert settings.Q_CLUSTER["catch_up"] is False


def test_setup_schedules_refuses_a_retry_shorter_than_the_timeout(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "retry": 60, "timeout": 600}
    with pytest.raises(CommandError, match="retry"):
        call_command("setup_schedules", stdout=io.StringIO())


def test_the_task_runs_a_pass(warm, use_local):
    warm(status=m.LeaseStatus.FAILED)
    result = tasks.reconcile_pass()
    assert result["candidates"] == 1 and result["retired"] == 1
