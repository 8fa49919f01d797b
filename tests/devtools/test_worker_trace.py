"""The chaos worker traces the reconciler through its signals, never by
replacing the reconciler's functions at runtime: after `instrument()` the
claim function and the step table are the product's own, and the lines the
supervisor reads (`CLAIM`, `STEP`, `DONE`) come from the signal receivers."""

import uuid

import pytest

from devtools.chaos import worker as chaos_worker
from sandboxes.reconciler import claims, machine, signals
from sandboxes.reconciler.claims import Claim
from sandboxes.reconciler.plan import Action, Plan


@pytest.fixture
def instrumented():
    real = (claims.claim_next, dict(machine.STEPS))
    chaos_worker.instrument()
    yield real
    signals.claimed.disconnect(dispatch_uid="chaos-worker-claimed")
    signals.step_started.disconnect(dispatch_uid="chaos-worker-step-started")
    signals.step_finished.disconnect(dispatch_uid="chaos-worker-step-finished")


def test_instrument_replaces_nothing_and_traces_through_signals(instrumented, capsys):
    claim_next, steps = instrumented
    assert claims.claim_next is claim_next
    assert steps == machine.STEPS
    claim = Claim(retirement_id=uuid.uuid4(), attempt_id=uuid.uuid4(), lease_id=None)
    signals.claimed.send(sender=__name__, claim=claim)
    plan = Plan(Action.COMPARE, claim.retirement_id, None, "sbx")
    signals.step_started.send(sender=__name__, plan=plan, attempt_id=claim.attempt_id)
    signals.step_finished.send(sender=__name__, plan=plan, attempt_id=claim.attempt_id)
    assert capsys.readouterr().out.splitlines() == [
        f"CLAIM {claim.attempt_id} {claim.retirement_id}",
        f"STEP {claim.retirement_id} compare {claim.attempt_id}",
        f"DONE {claim.retirement_id} compare",
    ]
