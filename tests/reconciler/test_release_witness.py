"""Issue 10 item 3: the console is a witness of releases, not their editor (DOMAIN
§2.5, seed 002), reproduced through load_events + reconcile --once against the
Daytona simulator over loopback.

Fails on main: ingest rewrote `keep_running` to `stop_and_retain` after an
unsuccessful run (so the correction never fired and the sandbox ran forever),
turned retain_on_failure + cancelled + keep_running into `expired`, and turned a
succeeded keep_running lease into `released` (so superseded_running_warm never
matched); the correction closed as `dismissed`.
"""

import pytest

from sandboxes import models as m
from sandboxes.metrics import render

pytestmark = pytest.mark.django_db

UNSUCCESSFUL = ["failed", "cancelled", "timed_out", "interrupted"]


def assert_corrected(world, story):
    lease = story.lease()
    r = story.record()
    assert r.kind == m.RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN
    assert r.stage == m.Stage.CORRECTED, (r.stage, r.holds, r.last_error)
    assert r.closed_reason == "stopped after an unsuccessful run"
    assert world.state(story.sandbox) == "stopped"
    assert world.mutations(story.sandbox) == ["stop"]
    # The console's own act: released, with its stop-and-retain receipt for that run;
    # the disposition Paperclip reported stays as evidence.
    assert lease.status == m.LeaseStatus.RELEASED
    assert lease.disposition == m.Disposition.KEEP_RUNNING
    receipt = r.receipts.get(kind=m.ReceiptKind.STOP_AND_RETAIN)
    assert receipt.run_id == lease.heartbeat_run_id
    assert receipt.provider_lease_id == story.sandbox
    actions = set(
        m.AuditEvent.objects.filter(sandbox_id=story.sandbox).values_list("action", flat=True)
    )
    assert {"retirement.corrected", "lease.stopped_and_retained"} <= actions
    assert "retirement.dismissed" not in actions


@pytest.mark.parametrize("run_status", UNSUCCESSFUL)
@pytest.mark.parametrize("order", ["run_then_release", "release_then_run"])
def test_keep_running_after_an_unsuccessful_run_is_recorded_then_corrected(
    world, run_status, order
):
    story = world.story(state="started").task(run_status="running")
    if order == "run_then_release":
        story.run(run_status).release("keep_running")
    else:
        story.release("keep_running").run(run_status)
    world.load(story.events)

    lease = story.lease()
    assert (lease.status, lease.disposition) == ("retained", "keep_running")
    world.reconcile()
    assert_corrected(world, story)

    # Later passes leave it stopped and kept: the task can still resume it.
    world.reconcile(2)
    assert world.mutations(story.sandbox) == ["stop"]
    assert world.state(story.sandbox) == "stopped"


def test_the_correction_waits_for_the_run_to_end_then_fires(world):
    """The release arrives while the run is live: nothing to correct yet."""
    story = world.story(state="started").task(run_status="running").release("keep_running")
    world.load(story.events)
    world.reconcile()
    assert world.mutations(story.sandbox) == []
    assert story.record() is None
    later = world.story()  # a new batch, a later event for the same run
    later.ids, later.sandbox = story.ids, story.sandbox
    world.load(later.run("failed").events)
    world.reconcile()
    assert_corrected(world, story)


def test_a_restore_source_released_keep_running_after_a_cancel_is_corrected_not_lost(world):
    story = world.story(state="started", policy="retain_on_failure").task(run_status="cancelled")
    world.load(story.release("keep_running").events)
    assert story.lease().status == m.LeaseStatus.RETAINED  # main: expired, never seen again
    world.reconcile()
    assert_corrected(world, story)


def test_a_succeeded_keep_running_lease_is_superseded_running_warm_when_the_task_moves(world):
    story = world.story(state="started").task(run_status="running")
    story.run("succeeded").release("keep_running").rebind()
    world.load(story.events)
    assert story.lease().status == m.LeaseStatus.RETAINED  # main: released
    world.reconcile()
    r = story.record()
    assert r.kind == m.RetirementKind.SUPERSEDED_RUNNING_WARM
    assert world.mutations(story.sandbox) == ["stop"]
    world.reconcile()
    r = story.record()
    assert (r.kind, r.stage) == (m.RetirementKind.ABANDONED_WARM, m.Stage.RETIRED)
    assert world.state(story.sandbox) == "destroyed"


def test_a_succeeded_keep_running_lease_whose_task_is_bound_here_is_left_running(world):
    story = world.story(state="started").task(run_status="succeeded").release("keep_running")
    world.load(story.events)
    world.reconcile(2)
    assert world.mutations(story.sandbox) == []
    assert story.record() is None


def test_the_corrected_outcome_is_shown_and_counted(world, client, django_user_model):
    story = world.story(state="started").task(run_status="failed").release("keep_running")
    world.load(story.events)
    world.reconcile()
    r = story.record()

    body = render().decode()
    assert 'paperclip_console_corrections_total{kind="stop_after_unsuccessful_run"} 1.0' in body
    assert 'paperclip_console_dismissals_total{kind="stop_after_unsuccessful_run"}' not in body

    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("reader", password="pw")
    user.groups.add(Group.objects.get(name="reviewers"))
    client.force_login(user)
    page = client.get(f"/sandboxes/{r.pk}/").content.decode()
    assert "<p data-closed>Corrected" in page
    assert "stopped after an unsuccessful run." in page
    assert "stop and retain" in page  # the receipt that shows it
