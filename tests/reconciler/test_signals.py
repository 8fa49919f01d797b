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
