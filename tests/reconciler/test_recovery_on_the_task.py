"""A recovery on the task holds the task, and a restore source is marked on the
lease too (issue 23 items 1 and 4, DOMAIN §2.2 and §2.5). Through load_events +
reconcile --once, the Daytona simulator over loopback.

Paperclip keeps one open recovery action per issue: the unique index
`issue_recovery_actions_active_source_uq` on (company_id, source_issue_id)
where status is active or escalated (paperclipai/paperclip
packages/db/src/schema/issue_recovery_actions.ts @ 37b856ab, lines 63-65), and
seed 001 holds on "open runs or recovery actions on the issue". Paperclip marks
a restore source on the lease itself (server/src/services/
legacy-workspace-restore-recovery.ts @ 34ed633, preserveLegacyWorkspaceRestoreSources,
lines 38-62: lease_policy retain_on_failure, metadata.workspaceRestoreRecovery
{schema, runId}).

Fails on main before the fix: the warm sandbox was started, compared and
destroyed while the task's restore recovery (naming another lease) was open,
and a marked restore source whose task's recovery named another lease was
never a candidate.
"""

import pytest

from sandboxes import models as m

from .world import SAVED, uid

pytestmark = pytest.mark.django_db


def _other_lease(story, world, *, policy="retain_on_failure", status="failed"):
    """Another lease of the same task, on a sandbox of its own."""
    other = world.sandbox()
    lease_id = uid()
    story.emit(
        "lease.upserted",
        {
            "lease_id": lease_id,
            "environment_id": story.env,
            "provider": "daytona",
            "provider_lease_id": other,
            "status": status,
            "lease_policy": policy,
            "acquired_at": story.start.isoformat(),
            "issue_id": story.ids["issue"],
        },
    )
    return lease_id, other


def _recovery(story, status, lease_id, kind="restore"):
    story.emit(
        "recovery_action.upserted",
        {
            "action_id": uid(),
            "issue_id": story.ids["issue"],
            "kind": kind,
            "status": status,
            "lease_id": lease_id,
        },
    )


def test_an_open_restore_recovery_on_the_task_holds_its_warm_sandbox(world):
    story = world.story({**SAVED, "notes/wip.md": b"unsaved\n"})
    story.task(run_status="failed", lease_status="failed").stop_receipt().rebind()
    restore_lease, restore_sandbox = _other_lease(story, world)
    _recovery(story, "active", restore_lease)
    world.load(story.events)

    world.reconcile(2)

    r = story.record()
    assert (r.kind, r.stage) == (m.RetirementKind.ABANDONED_WARM, m.Stage.HELD)
    assert m.HoldCode.RECOVERY_OPEN in r.holds
    assert r.hold_reasons[m.HoldCode.RECOVERY_OPEN] == "restore recovery on PAP-1 is open."
    assert world.mutations(story.sandbox) == []
    assert world.mutations(restore_sandbox) == []


def test_the_hold_ends_when_the_recovery_closes(world):
    story = world.story()
    story.task(run_status="failed", lease_status="failed").stop_receipt().rebind()
    restore_lease, _ = _other_lease(story, world)
    action = uid()
    data = {
        "action_id": action,
        "issue_id": story.ids["issue"],
        "kind": "restore",
        "status": "active",
        "lease_id": restore_lease,
    }
    story.emit("recovery_action.upserted", data)
    world.load(story.events)
    world.reconcile()
    assert story.record().stage == m.Stage.HELD

    story.events = []
    story.emit("recovery_action.upserted", {**data, "status": "resolved"})
    world.load(story.events)
    world.reconcile(2)

    r = story.record()
    assert r.stage == m.Stage.RETIRED, (r.stage, r.holds, r.last_error)


def test_a_marked_restore_source_is_judged_by_every_recovery_on_its_task(world):
    story = world.story(policy="retain_on_failure")
    marker = {"schema": "paperclip.workspace-restore-recovery.v1", "runId": story.ids["run"]}
    story.task(
        run_status="failed", lease_status="failed", metadata={"workspaceRestoreRecovery": marker}
    ).stop_receipt().rebind()
    other_lease, _ = _other_lease(story, world)
    _recovery(story, "resolved", other_lease)
    world.load(story.events)

    world.reconcile(2)

    r = story.record()
    assert r is not None, "a marked restore source is listed once its task's recovery is over"
    assert (r.kind, r.stage) == (m.RetirementKind.CLOSED_RESTORE_SOURCE, m.Stage.RETIRED), (
        r.stage,
        r.holds,
    )


def test_an_unmarked_restore_source_is_still_owned_by_restore_recovery(world):
    """Without the marker, an action naming another lease says nothing of this one."""
    story = world.story(policy="retain_on_failure")
    story.task(run_status="failed", lease_status="failed").stop_receipt().rebind()
    other_lease, _ = _other_lease(story, world)
    _recovery(story, "resolved", other_lease)
    world.load(story.events)
    world.reconcile(2)
    assert story.record() is None
    assert world.mutations(story.sandbox) == []
