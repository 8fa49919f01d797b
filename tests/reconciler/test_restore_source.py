"""Issue 10 item 5: closed_restore_source needs closed recovery (DOMAIN §2.1, seed
000; seed 001 "Out of scope": restore recovery owns a restore source until it
is done). Through load_events + reconcile --once, Daytona simulator over loopback.

Paperclip's restore evidence names leases in
evidence.workspaceRestoreRecovery.leaseIds[] (paperclipai/paperclip:
server/src/services/legacy-execution-recovery.ts); the ingest event names one
with `lease_id`.

Fails on main: with zero recovery actions a failed run's restore source was a
candidate, exported and destroyed on the first pass; the task's move was never
checked. Since issue 23 an open action on the task holds every sandbox of it
again, as Paperclip's one-open-action-per-issue index implies; the console's
own file recovery holds only its lease (tests/reconciler/test_preservation.py).
"""

import pytest

from sandboxes import models as m

from .world import SAVED, uid

pytestmark = pytest.mark.django_db

UNSAVED = {**SAVED, "notes/draft.md": b"not saved anywhere\n"}


def restore_source(world, files=UNSAVED):
    """A failed run's stopped sandbox kept as a workspace-restore source."""
    story = world.story(files, policy="retain_on_failure")
    story.task(run_status="failed", lease_status="failed").stop_receipt()
    return story


def action(story, status, *, lease=True, lease_id=None):
    data = {
        "action_id": uid(),
        "issue_id": story.ids["issue"],
        "kind": "workspace_restore",
        "status": status,
    }
    if lease:
        data["lease_id"] = lease_id or story.ids["lease"]
    story.emit("recovery_action.upserted", data)
    return story


def assert_untouched(world, story):
    assert world.mutations(story.sandbox) == []
    assert world.state(story.sandbox) == "stopped"
    assert not m.Attachment.objects.filter(issue_id=story.ids["issue"]).exists()


def assert_retired(world, story):
    r = story.record()
    assert (r.kind, r.stage) == (m.RetirementKind.CLOSED_RESTORE_SOURCE, m.Stage.RETIRED), (
        r.stage,
        r.holds,
        r.last_error,
    )
    assert world.state(story.sandbox) == "destroyed"
    assert m.Attachment.objects.filter(path="notes/draft.md").exists()  # exported first


def test_no_recovery_action_yet_is_not_a_candidate(world):
    story = restore_source(world).rebind()
    story.issue("done")
    world.load(story.events)
    world.reconcile(2)
    assert story.record() is None
    assert_untouched(world, story)


def test_recovery_closed_and_the_task_moved_on_is_retired(world):
    story = action(restore_source(world).rebind(), "resolved")
    world.load(story.events)
    world.reconcile()
    assert_retired(world, story)


def test_recovery_closed_but_the_task_still_on_this_workspace_is_kept(world):
    story = action(restore_source(world), "resolved")
    world.load(story.events)
    world.reconcile(2)
    assert story.record() is None
    assert_untouched(world, story)


@pytest.mark.parametrize("second", ["active", "escalated"])
def test_every_action_naming_it_must_be_closed(world, second):
    story = action(action(restore_source(world).rebind(), "resolved"), second)
    world.load(story.events)
    world.reconcile(2)
    assert story.record() is None
    assert_untouched(world, story)


def test_an_action_naming_no_lease_counts_for_every_lease_of_its_task(world):
    story = action(restore_source(world).rebind(), "cancelled", lease=False)
    world.load(story.events)
    world.reconcile()
    assert_retired(world, story)

    open_story = action(restore_source(world).rebind(), "active", lease=False)
    world.load(open_story.events)
    world.reconcile(2)
    assert open_story.record() is None
    assert_untouched(world, open_story)


def test_an_open_action_naming_another_lease_holds_this_one_too(world):
    """Paperclip keeps one open recovery action per issue (unique index
    issue_recovery_actions_active_source_uq on (company_id, source_issue_id),
    packages/db/src/schema/issue_recovery_actions.ts @ 37b856a), and seed 001
    holds on "recovery actions on the issue": an open action on the task holds
    every sandbox of it, whichever lease it names (issue 23 item 1; this test
    asserted the opposite before)."""
    other = world.story()
    story = action(restore_source(world).rebind(), "resolved")
    other_lease = uid()
    story.emit(
        "lease.upserted",
        {
            "lease_id": other_lease,
            "environment_id": story.env,
            "provider": "daytona",
            "provider_lease_id": other.sandbox,
            "status": "failed",
            "lease_policy": "retain_on_failure",
            "acquired_at": story.start.isoformat(),
            "issue_id": story.ids["issue"],
        },
    )
    action(story, "active", lease_id=other_lease)
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert r is None, (r.stage, r.holds)  # all of its task's recovery is not over
    assert_untouched(world, story)
    assert world.mutations(other.sandbox) == []
