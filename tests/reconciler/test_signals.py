"""The reconciler announces each claim and each step through Django signals
(sandboxes/reconciler/signals.py), the hook the chaos worker traces with:
a claim after it is committed, a step before it runs and after it returns or
raises."""

from contextlib import contextmanager

import pytest

from sandboxes import models as m
from sandboxes.reconciler import signals
from sandboxes.reconciler.plan import Action

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


@contextmanager
def listening():
    heard = []

    def on_claimed(sender, claim, **kwargs):
        heard.append(("claimed", claim.retirement_id))

    def on_started(sender, plan, attempt_id, **kwargs):
        heard.append(("started", plan.action))

    def on_finished(sender, plan, attempt_id, **kwargs):
        heard.append(("finished", plan.action))

    pairs = [
        (signals.claimed, on_claimed),
        (signals.step_started, on_started),
        (signals.step_finished, on_finished),
    ]
    for signal, receiver in pairs:
        signal.connect(receiver)
    try:
        yield heard
    finally:
        for signal, receiver in pairs:
            signal.disconnect(receiver)


def test_a_pass_announces_the_claim_then_each_step_around_it(warm, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED)  # abandoned_warm: compare, then retire
    with listening() as heard:
        reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED
    assert heard == [
        ("claimed", r.pk),
        ("started", Action.COMPARE),
        ("finished", Action.COMPARE),
        ("started", Action.RETIRE),
        ("finished", Action.RETIRE),
    ]


class HashFails:
    """The local provider, except that reading the workspace fails."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def hash_files(self, *args, **kwargs):
        raise RuntimeError("the toolbox is down")


def test_a_step_that_fails_is_still_announced_as_finished(warm, reconcile, local):
    lease = warm(status=m.LeaseStatus.FAILED)
    with listening() as heard:
        reconcile(provider_for=lambda env: HashFails(local))
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and "toolbox is down" in r.last_error
    assert heard == [
        ("claimed", r.pk),
        ("started", Action.COMPARE),
        ("finished", Action.COMPARE),
    ]


def test_each_step_announces_its_checkpoints_in_order(warm, reconcile, at_checkpoint):
    """signals.checkpoint: the points a crash test makes a worker die at."""
    compared = warm(status=m.LeaseStatus.FAILED)
    exported = warm(status=m.LeaseStatus.FAILED, files={"README.md": b"# task\n", "new.md": b"x"})
    heard = []
    at_checkpoint(heard.append)
    reconcile()
    assert retirement_of(compared).stage == retirement_of(exported).stage == m.Stage.RETIRED
    clean = ["compare:before_receipt", "compare:after_receipt", "retire:after_destroy"]
    dirty = [*clean[:2], "export:before_receipt", "export:after_receipt", clean[2]]
    # One record after the other (a worker claims one at a time), in either order.
    assert heard in (clean + dirty, dirty + clean), heard


def test_a_receiver_that_raises_stops_the_worker_where_it_is(warm, reconcile, at_checkpoint):
    class Died(BaseException):
        pass

    def die(name):
        if name == "compare:before_receipt":
            raise Died(name)

    lease = warm(status=m.LeaseStatus.FAILED)
    at_checkpoint(die)
    with pytest.raises(Died):
        reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.COMPARING and r.attempt_id is not None  # left to expire
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).exists()
