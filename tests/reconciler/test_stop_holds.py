"""Issue 10 item 4: every hold blocks the stop-only steps too (DOMAIN §2.2; seed 001
"every existing hold still applies", seed 002 "preserve the existing ownership
hold"), except no_stop_receipt, task_can_resume, writer_active, retention and
unknown_age. Each hold against each stop path, through load_events + reconcile
--once against the Daytona simulator over loopback.

Fails on main: both stop paths ignored every hold but operator_hold, so the
console stopped a sandbox with an export in flight, one another active lease
was using, and one with a pending restore intent.
"""

from datetime import timedelta

import pytest

from sandboxes import models as m

from .world import uid

pytestmark = pytest.mark.django_db


def correction(world):
    """Seed 002: a failed run whose sandbox was kept running."""
    story = world.story(state="started").task(run_status="failed").release("keep_running")
    return story


def superseded(world):
    """Seed 001: a succeeded warm run kept running, then a Retry moved the task."""
    story = world.story(state="started").task(run_status="succeeded").release("keep_running")
    return story.rebind()


STOP_PATHS = {"stop_after_unsuccessful_run": correction, "superseded_running_warm": superseded}


def add_hold(story, code):
    i = story.ids
    if code == "issue_run_active":
        story.emit("run.upserted", {"run_id": uid(), "issue_id": i["issue"], "status": "running"})
    elif code == "recovery_open":
        story.emit(
            "recovery_action.upserted",
            {
                "action_id": uid(),
                "issue_id": i["issue"],
                "kind": "workspace_restore",
                "status": "active",
                "lease_id": i["lease"],
            },
        )
    elif code == "export_pending":
        story.emit(
            "export.upserted", {"export_id": uid(), "lease_id": i["lease"], "state": "pending"}
        )
    elif code == "intent_pending":
        story.emit(
            "intent.upserted",
            {"intent_id": uid(), "lease_id": i["lease"], "kind": "restore", "state": "pending"},
        )
    elif code == "sandbox_shared":
        # An older row on the same sandbox that another task still holds active.
        other = {k: uid() for k in ("issue", "ws", "run")}
        story.emit("issue.upserted", {"issue_id": other["issue"], "status": "in_progress"})
        story.emit(
            "lease.upserted",
            {
                "lease_id": uid(),
                "environment_id": story.env,
                "provider": "daytona",
                "provider_lease_id": story.sandbox,
                "status": "active",
                "lease_policy": "reuse_by_environment",
                "acquired_at": (story.start - timedelta(hours=2)).isoformat(),
                "issue_id": other["issue"],
            },
        )
    else:  # pragma: no cover
        raise AssertionError(code)


BLOCKING = [
    "issue_run_active",
    "recovery_open",
    "export_pending",
    "intent_pending",
    "sandbox_shared",
]


@pytest.mark.parametrize("path", sorted(STOP_PATHS))
@pytest.mark.parametrize("code", BLOCKING)
def test_each_hold_blocks_each_stop_path(world, path, code):
    story = STOP_PATHS[path](world)
    add_hold(story, code)
    world.load(story.events)
    world.reconcile(2)
    r = story.record()
    assert r.kind == path
    assert r.stage == m.Stage.HELD, (r.stage, r.holds)
    assert code in r.holds
    assert world.mutations(story.sandbox) == []
    assert world.state(story.sandbox) == "started"
    assert not r.receipts.exists()


def test_an_operator_hold_blocks_the_stop(world):
    story = correction(world)
    add_hold(story, "intent_pending")
    world.load(story.events)
    world.reconcile()
    r = story.record()
    r.operator_hold_reason = "investigating"
    r.save()
    # The intent settles; the operator's hold still keeps it.
    world.load([story.emit("intent.upserted", {**story.events[-1]["data"], "state": "confirmed"})])
    world.reconcile()
    r.refresh_from_db()
    assert r.holds == ["task_can_resume", "operator_hold"]
    assert world.mutations(story.sandbox) == []


def test_once_the_hold_clears_the_stop_goes_ahead(world):
    story = correction(world)
    add_hold(story, "export_pending")
    world.load(story.events)
    world.reconcile()
    assert world.mutations(story.sandbox) == []
    export = story.events[-1]["data"]
    world.load([story.emit("export.upserted", {**export, "state": "done"})])
    world.reconcile()
    assert world.mutations(story.sandbox) == ["stop"]
    assert story.record().stage == m.Stage.CORRECTED


def test_holds_a_stop_does_not_wait_for(world):
    """task_can_resume (bound here) and writer_active (a writer on the workspace):
    the stop keeps the disk and a stopped sandbox still resumes."""
    story = world.story(state="started").task(run_status="failed", writer=True)
    story.release("keep_running")
    world.load(story.events)
    world.reconcile()
    r = story.record()
    assert {"task_can_resume", "writer_active"} <= set(r.holds)
    assert r.stage == m.Stage.CORRECTED
    assert world.mutations(story.sandbox) == ["stop"]
