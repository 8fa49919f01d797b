"""Issue 10 item 9: what cannot be judged stays visible and held (DOMAIN §2.2).

- task_can_resume is evaluated over every row naming the sandbox: a row that
  sorts older (clock skew) but that its task is still bound to protects it;
- a sandbox with an undated row is listed and held `unknown_age`;
- a lease whose provider the console cannot drive is listed and held
  `provider_unsupported`, and never touched.

Fails on main: only the newest row's binding counted, an undated row hid its
sandbox, and a lease naming another provider was refused at ingest.
"""

from datetime import timedelta

import pytest

from devtools.events import Events
from sandboxes import models as m
from tests import factories as f

from .conftest import ago, retirement_of

pytestmark = pytest.mark.django_db


def test_an_older_row_the_task_is_still_bound_to_protects_the_sandbox(warm, local, reconcile):
    newest = warm(status=m.LeaseStatus.FAILED, heartbeat_run__status=m.RunStatus.FAILED)
    f.rebind_to_new_workspace(newest)
    # A row on the same sandbox that sorts older (its host's clock ran behind),
    # released, whose task is bound to its workspace: the next turn resumes it.
    older = f.EnvironmentLeaseFactory(
        environment=newest.environment,
        provider_lease_id=newest.provider_lease_id,
        status=m.LeaseStatus.RELEASED,
        acquired_at=newest.acquired_at - timedelta(minutes=1),
    )
    assert older.issue.bound_workspace_id == older.execution_workspace_id
    reconcile()
    r = retirement_of(newest)
    assert r.kind == m.RetirementKind.ABANDONED_WARM
    assert r.stage == m.Stage.HELD
    assert "task_can_resume" in r.holds
    assert local.count("start") == local.count("destroy") == 0


def test_a_sandbox_with_an_undated_row_is_listed_and_held_unknown_age(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED, heartbeat_run__status=m.RunStatus.FAILED)
    f.rebind_to_new_workspace(lease)
    f.EnvironmentLeaseFactory(
        environment=lease.environment,
        provider_lease_id=lease.provider_lease_id,
        status=m.LeaseStatus.EXPIRED,
        acquired_at=None,
    )
    reconcile()
    r = retirement_of(lease)
    assert r is not None, "the sandbox must stay visible"
    assert r.holds == ["unknown_age"]
    assert r.stage == m.Stage.HELD
    assert local.count("start") == local.count("destroy") == 0


def test_a_lease_of_a_provider_the_console_cannot_drive_is_listed_and_held(world):
    env = world.story().env  # a daytona environment; this one is e2b
    e2b = Events().environment(
        "6a0e7f8c-1d2e-4f00-9a00-00000000e2b0",
        "e2b",
        "e2b",
        retirement_mode="auto",
        id="env-e2b",
        at=ago(days=1),
    )
    assert env
    world.load([e2b])
    story = world.story(state="started")
    story.env = e2b["data"]["environment_id"]
    story.task(run_status="failed", provider="e2b").release("keep_running")
    world.load(story.events)
    world.reconcile(2)
    lease = story.lease()
    assert lease.provider == "e2b"
    r = story.record()
    assert r.kind == m.RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN
    assert r.stage == m.Stage.HELD
    assert "provider_unsupported" in r.holds
    assert r.hold_reasons["provider_unsupported"].startswith("The console has no client")
    assert world.calls(story.sandbox) == []
