"""Issue 10 item 6: resume_failed is proved by its replacement (DOMAIN §2.1, seed
004). The console never starts or compares the sandbox; it re-checks that the
workspace is still saved with no writer, destroys by id, retries a sandbox stuck
mid-transition until it is gone, and its retirement receipt names the proof
basis `replacement`. In manual mode it still waits for approval. Through
load_events + reconcile --once against the Daytona simulator over loopback.

Paperclip moves the old lease to pending_cleanup with failure_reason
resume_failed (paperclipai/paperclip:
server/src/services/reusable-sandbox-resume-replacement.ts, seed 004).

Fails on main: the sandbox was started and compared (and a dirty one
exported), and the retirement receipt named a compare as its proof.
"""

import pytest
from django.utils import timezone

from sandboxes import models as m

from .world import SAVED

pytestmark = pytest.mark.django_db


def replaced(world, files=SAVED, **task):
    story = world.story(files, state="stopped")
    story.task(
        run_status="failed",
        lease_status="pending_cleanup",
        failure_reason="resume_failed",
        cleanup_status="pending",
        **task,
    )
    return story


def retirement_receipt(story):
    return story.record().receipts.get(kind=m.ReceiptKind.RETIREMENT)


def test_destroyed_by_id_without_a_start_or_a_compare(world):
    # Files differ from the save: a compare would export them. The replacement is
    # the proof (Paperclip checked the save and backup when it replaced it).
    story = replaced(world, {**SAVED, "scratch.tmp": b"junk\n"})
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert (r.kind, r.stage) == (m.RetirementKind.RESUME_FAILED, m.Stage.RETIRED)
    assert world.mutations(story.sandbox) == ["destroy"]
    assert not world.calls(story.sandbox, op="execute")
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).exists()
    assert retirement_receipt(story).payload["basis"] == "replacement"
    delete = world.calls(story.sandbox, op="destroy")[0]
    assert delete["path"] == f"/sandbox/{story.sandbox}"  # by id, never by name
    assert world.state(story.sandbox) == "destroyed"


def test_a_writer_on_the_workspace_holds_it(world):
    story = replaced(world, writer=True)
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert r.stage == m.Stage.HELD and "writer_active" in r.holds
    assert world.mutations(story.sandbox) == []


def test_a_workspace_no_longer_saved_is_not_destroyed_and_retries(world):
    story = replaced(world)
    story.emit(
        "workspace.upserted",
        {"workspace_id": story.ids["ws"], "issue_id": story.ids["issue"], "save_state": "saving"},
    )
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert world.mutations(story.sandbox) == []
    assert r.stage in (m.Stage.HELD, m.Stage.FAILED), r.stage
    if r.stage == m.Stage.FAILED:
        assert "no longer saved" in r.last_error


@pytest.mark.slow
def test_a_sandbox_stuck_mid_transition_is_retried_until_gone(world):
    story = replaced(world)
    world.load(story.events)
    world.sim.sandbox_control(story.sandbox, {"state": "stopping", "stuck": True})
    with world.sim.lock:
        world.sim.sandboxes[story.sandbox].target = "stopped"
    world.reconcile()
    r = story.record()
    assert r.stage == m.Stage.FAILED and r.attempts == 1, (r.stage, r.last_error)
    assert world.state(story.sandbox) == "stopping"
    # Still stuck on the next attempt: still failing, never started.
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    world.reconcile()
    r.refresh_from_db()
    assert r.attempts == 2
    # The provider settles it: the retry deletes it.
    world.sim.sandbox_control(story.sandbox, {"stuck": False})
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    world.reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    assert world.state(story.sandbox) == "destroyed"
    assert "start" not in world.mutations(story.sandbox)
    assert retirement_receipt(story).payload["basis"] == "replacement"


def test_manual_mode_waits_for_approval(world_factory, client, django_user_model):
    world = world_factory("manual")
    story = replaced(world)
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert r.stage == m.Stage.AWAITING_APPROVAL
    assert world.mutations(story.sandbox) == []

    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("op", password="pw")
    user.groups.add(Group.objects.get(name="operators"))
    client.force_login(user)
    response = client.post(f"/sandboxes/{r.pk}/approve/", {"reason": "replaced, saved"})
    assert response.status_code in (200, 302)
    assert m.Receipt.objects.filter(retirement=r, kind=m.ReceiptKind.APPROVAL).exists()
    world.reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED
    assert world.mutations(story.sandbox) == ["destroy"]
