"""Issue 10 items 7 and 8: the console's file-recovery action for a preservation
source (seed 003, DOMAIN §2.5), through load_events + reconcile --once against
the Daytona simulator over loopback.

Item 7: the action names its lease, holds only that sandbox, and is resolved
when Paperclip clears the writer hold or the lease stops being a preservation
source; while the writer hold is on, the console neither starts, exports nor
destroys that sandbox. Fails on main: the action was never closed, and (naming
its task) it held every kept sandbox of the task forever.

Item 8: the stop-and-retain receipt must match run, lease AND provider_lease_id
(seed 003: "a confirmed stop-and-retain receipt for the same run, lease and
allocation"), and a receipt ingested before its lease row is validated when
the lease arrives. Fails on main: a receipt naming another sandbox made the
lease a preservation source, and nothing flagged it.
"""

import pytest

from sandboxes import models as m
from sandboxes.ingest import apply_events, validate_batch

from .world import SAVED

pytestmark = pytest.mark.django_db

UNSAVED = {**SAVED, "src/half_done.py": b"# the cancelled run's work\n"}


def preserved(world, *, sandbox_in_receipt=None):
    """Seed 003's incident: a reassigned task's cancelled warm run, released through
    stop-and-retain, its workspace still held by that run."""
    story = world.story(UNSAVED)
    story.task(run_status="cancelled", lease_status="released", writer=True)
    story.stop_and_retain(provider_lease_id=sandbox_in_receipt or story.sandbox)
    return story.rebind()  # reassigned: the new assignee works in a fresh workspace


def file_recovery(story):
    return m.RecoveryAction.objects.filter(kind="file_recovery", lease_id=story.ids["lease"])


def test_recorded_naming_its_lease_and_it_holds_only_that_sandbox(world):
    story = preserved(world)
    # Another kept sandbox of the same task: a failed warm lease, stopped.
    sibling = world.story()
    sibling.ids["issue"] = story.ids["issue"]
    sibling.task(run_status="failed", lease_status="failed").stop_receipt()
    sibling.events = [e for e in sibling.events if e["type"] != "issue.upserted"]
    world.load(story.events + sibling.events)
    world.reconcile()

    [action] = file_recovery(story)
    assert action.status == "active" and action.evidence["leaseId"] == story.ids["lease"]
    r = story.record()
    assert r.stage == m.Stage.HELD
    assert {"recovery_open", "writer_active"} <= set(r.holds)
    assert world.mutations(story.sandbox) == []
    # The sibling is not held by the file-recovery action.
    s = sibling.record()
    assert "recovery_open" not in s.holds
    assert s.stage == m.Stage.RETIRED, (s.stage, s.holds, s.last_error)


def test_while_the_writer_hold_is_on_the_sandbox_is_never_touched(world):
    story = preserved(world)
    world.load(story.events)
    world.reconcile(3)
    assert world.mutations(story.sandbox) == []
    assert not world.calls(story.sandbox, op="execute")
    assert world.state(story.sandbox) == "stopped"


def test_resolved_when_paperclip_clears_the_writer_hold_then_salvaged(world):
    story = preserved(world)
    world.load(story.events)
    world.reconcile()
    world.load([story.writer(None).events[-1]])  # Paperclip's recovery saved the files
    world.reconcile()
    [action] = file_recovery(story)
    assert action.status == "resolved"
    assert action.outcome.startswith("writer hold cleared")
    assert m.AuditEvent.objects.filter(
        action="recovery_action.resolved", object_id=str(action.pk)
    ).exists()
    r = story.record()
    assert r.stage == m.Stage.RETIRED, (r.stage, r.holds, r.last_error)
    # Salvage still ran: the unsaved file was exported before the destroy.
    assert m.Attachment.objects.filter(path="src/half_done.py").exists()


def test_resolved_when_the_lease_stops_being_a_preservation_source(world):
    story = preserved(world)
    world.load(story.events)
    world.reconcile()
    # Paperclip destroyed the sandbox itself: the lease expired.
    world.load([story.release("destroy").events[-1]])
    world.reconcile()
    [action] = file_recovery(story)
    assert action.status == "resolved"
    assert action.outcome == "the lease is no longer a preservation source"


def test_a_receipt_for_another_sandbox_makes_no_preservation_source(world):
    story = preserved(world, sandbox_in_receipt="some-other-sandbox")
    # The receipt arrives first (it names a lease the console does not know yet),
    # the lease row later, in another batch.
    receipt = [e for e in story.events if e["type"] == "receipt.recorded"]
    rest = [e for e in story.events if e["type"] != "receipt.recorded"]
    world.load(receipt)
    batch, errors = validate_batch({"events": rest}, max_events=1000)
    assert not errors
    result = apply_events("test", batch)
    assert any(
        w.path == "data.provider_lease_id" and "some-other-sandbox" in w.message
        for w in result.warnings
    ), result.warnings
    assert m.AuditEvent.objects.filter(action="receipt.sandbox_mismatch").exists()
    world.reconcile()
    assert not file_recovery(story).exists()


def test_a_receipt_before_its_lease_in_the_same_batch_is_validated(world):
    story = preserved(world, sandbox_in_receipt="some-other-sandbox")
    events = sorted(story.events, key=lambda e: e["type"] != "receipt.recorded")
    batch, errors = validate_batch({"events": events}, max_events=1000)
    assert not errors
    result = apply_events("test", batch)
    assert any(w.path == "data.provider_lease_id" for w in result.warnings)
    world.reconcile()
    assert not file_recovery(story).exists()
