"""Policy preview (issue 17): what the next pass would do, computed with the
pass's own listing, hold and decision functions, matches what a real pass then
does, sandbox by sandbox, on the demo fleet (every kind and every hold); it
writes nothing; and under a proposed policy it predicts the pass that follows
saving that policy."""

from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sandboxes import models as m
from sandboxes.providers.local import LocalProvider
from sandboxes.reconciler.passes import run_pass
from sandboxes.reconciler.preview import CATEGORIES, Policy, preview
from sandboxes.rules.proof import REPLACEMENT
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path, monkeypatch):
    from sandboxes.providers.registry import reset_providers

    settings.LOCAL_SANDBOX_ROOT = tmp_path / "sandboxes"
    reset_providers()
    call_command("demo_fleet", quiet=True)
    provider = LocalProvider(root=settings.LOCAL_SANDBOX_ROOT)
    monkeypatch.setattr(
        "sandboxes.reconciler.worker.default_provider_for", lambda env, name="": provider
    )
    yield provider
    reset_providers()


def expected(outcome) -> dict:
    return {c: {row["sandbox_id"] for row in rows} for c, rows in outcome.rows.items() if rows}


def what_the_pass_did(env, started) -> dict:
    """Each sandbox of `env`, classified by what the pass that began at `started` did."""
    out = defaultdict(set)
    rows = m.Retirement.objects.filter(environment=env)
    compared = set(
        m.Receipt.objects.filter(
            retirement__environment=env,
            kind=m.ReceiptKind.SALVAGE_COMPARE,
            created_at__gte=started,
        ).values_list("retirement_id", flat=True)
    )
    stopped = set(
        m.Receipt.objects.filter(
            retirement__environment=env,
            kind=m.ReceiptKind.STOP_AND_RETAIN,
            created_at__gte=started,
        ).values_list("retirement_id", flat=True)
    )
    noticed = set(
        m.AuditEvent.objects.filter(action="retirement.noticed", at__gte=started).values_list(
            "object_id", flat=True
        )
    )
    for r in rows:
        if r.closed_at is not None and r.closed_at < started:
            continue
        sid = r.provider_lease_id
        if r.pk in compared:
            out["salvage"].add(sid)
        elif r.pk in stopped:
            out["stop"].add(sid)
        elif r.stage == m.Stage.RETIRED:
            out["retire"].add(sid)
        elif r.stage == m.Stage.DISMISSED:
            out["dismissed"].add(sid)
        elif (
            r.stage in (m.Stage.LISTED, m.Stage.AWAITING_APPROVAL)
            and r.next_attempt_at is not None
            and r.next_attempt_at >= started
        ):
            out["wait_cap"].add(sid)  # due now, put back for the next pass
        elif r.stage == m.Stage.NOTICED:
            out["notice" if str(r.pk) in noticed else "noticed"].add(sid)
        elif r.stage == m.Stage.HELD:
            # Held by the retirement window alone: it waits for the opening.
            out["window" if r.holds == [m.HoldCode.OUTSIDE_WINDOW] else "held"].add(sid)
        elif r.stage == m.Stage.AWAITING_APPROVAL:
            out["awaiting_approval"].add(sid)
        elif r.stage == m.Stage.FAILED:
            out["retry_later"].add(sid)
        elif r.stage == m.Stage.LISTED:
            out["observe" if env.retirement_mode == "observe" else "listed"].add(sid)
        else:
            out[r.stage].add(sid)
    return dict(out)


def held_codes(env) -> Counter:
    codes = Counter()
    for r in m.Retirement.objects.filter(environment=env, stage=m.Stage.HELD):
        codes.update(r.holds)
    return codes


def test_the_preview_matches_what_each_pass_then_does_on_every_kind_and_hold(demo):
    envs = list(m.Environment.objects.all())
    seen_categories, seen_codes = set(), set()
    for _ in range(3):
        previews = {env.pk: preview(env, Policy.of(env)) for env in envs}
        started = timezone.now()
        run_pass()
        for env in envs:
            pv = previews[env.pk]
            assert pv.current.counts == pv.proposed.counts  # the same policy
            did = what_the_pass_did(env, started)
            assert expected(pv.proposed) == did, env.name
            assert pv.proposed.counts == {c: len(s) for c, s in did.items()}
            assert pv.proposed.held_by_code == dict(held_codes(env)), env.name
            seen_categories |= set(did)
            seen_codes |= set(pv.proposed.held_by_code)
    # The fleet exercised the interesting answers and every hold code.
    assert {"salvage", "held", "awaiting_approval", "stop"} <= seen_categories
    assert seen_codes == {c.value for c in m.HoldCode}

    # manual → auto: the records waiting for approval are retired by the next pass.
    env = m.Environment.objects.get(name="local-demo-manual")
    waiting = set(
        m.Retirement.objects.filter(environment=env, stage=m.Stage.AWAITING_APPROVAL).values_list(
            "provider_lease_id", flat=True
        )
    )
    assert waiting
    pv = preview(env, Policy("auto", env.warm_retention, 50, timedelta(0)))
    assert expected(pv.proposed)["retire"] == waiting
    assert "retire" not in pv.current.counts
    m.Environment.objects.filter(pk=env.pk).update(retirement_mode="auto")
    started = timezone.now()
    run_pass()
    env.refresh_from_db()
    assert what_the_pass_did(env, started) == expected(pv.proposed)


def test_the_preview_writes_nothing_and_costs_a_fixed_number_of_queries(demo):
    env = m.Environment.objects.get(name="local-demo")
    run_pass()
    tables = [mdl for mdl in m.__dict__.values() if isinstance(mdl, type) and hasattr(mdl, "_meta")]
    before = {t: t.objects.count() for t in tables if not t._meta.abstract}
    updated = set(m.Retirement.objects.values_list("pk", "updated_at"))
    with CaptureQueriesContext(connection) as queries:
        preview(env, Policy("auto", timedelta(hours=1), 1, timedelta(hours=3)))
    assert all(
        q["sql"].lstrip().upper().startswith(("SELECT", "SET", "SAVEPOINT", "RELEASE"))
        for q in queries
    ), [q["sql"][:80] for q in queries]
    # records, receipts, and the candidate listing and re-judge (each: savepoint, SET
    # LOCAL jit, SELECT, release): a fixed number at any fleet size.
    assert len(queries) <= 12
    assert {t: t.objects.count() for t in before} == before
    assert set(m.Retirement.objects.values_list("pk", "updated_at")) == updated


def test_a_proposed_policy_predicts_the_pass_after_saving_it(warm, reconcile, local, sandbox):
    """manual → auto with a notice period and a cap of 1, and a shorter retention:
    the preview of the new policy is what the next pass does."""
    env = f.EnvironmentFactory(retirement_mode="manual", warm_retention=timedelta(hours=24))
    abandoned = [warm(env=env) for _ in range(3)]
    for lease in abandoned:
        f.rebind_to_new_workspace(lease)
    done = warm(env=env, released_at=timezone.now() - timedelta(hours=5))
    done.issue.status = m.IssueStatus.DONE
    done.issue.save(update_fields=["status"])
    reconcile()  # manual: compared, now awaiting approval; done_task_warm held by retention
    assert m.Retirement.objects.filter(stage=m.Stage.AWAITING_APPROVAL).count() == 3

    proposed = Policy("auto", timedelta(hours=2), 1, timedelta(0))
    pv = preview(env, proposed)
    assert pv.current.counts == {"awaiting_approval": 3, "held": 1}
    assert pv.current.held_by_code == {"retention": 1}
    # One retirement (the cap), whichever record a pass claims first: one of the
    # approved-in-waiting (retire) or the record retention no longer holds (salvage).
    assert pv.proposed.counts in ({"retire": 1, "wait_cap": 3}, {"salvage": 1, "wait_cap": 3})
    env.retirement_mode, env.warm_retention = proposed.retirement_mode, proposed.warm_retention
    env.max_retirements_per_pass = proposed.max_retirements_per_pass
    env.save()
    started = timezone.now()
    reconcile()
    did = what_the_pass_did(env, started)
    assert did == expected(pv.proposed)
    assert m.Retirement.objects.filter(stage=m.Stage.RETIRED).count() == 1


def test_a_notice_period_in_the_preview(warm, reconcile):
    env = f.EnvironmentFactory(retirement_mode="auto", max_retirements_per_pass=50)
    leases = [warm(env=env) for _ in range(2)]
    for lease in leases:
        f.rebind_to_new_workspace(lease)
    pv = preview(env, Policy("auto", env.warm_retention, 50, timedelta(hours=4)))
    assert pv.current.counts == {"salvage": 2}
    assert pv.proposed.counts == {"salvage": 2}
    m.Environment.objects.filter(pk=env.pk).update(notice_period=timedelta(hours=4))
    reconcile()
    env.refresh_from_db()
    assert set(m.Retirement.objects.values_list("stage", flat=True)) == {m.Stage.NOTICED}
    pv = preview(env, Policy("auto", env.warm_retention, 50, timedelta(0)))
    assert pv.current.counts == {"noticed": 2} and pv.proposed.counts == {"noticed": 2}
    # Once the notice is over, the pass retires them (re-checking everything).
    later = timezone.now() + timedelta(hours=5)
    assert preview(env, Policy.of(env), now=later).current.counts == {"retire": 2}
    assert set(CATEGORIES) >= set(pv.proposed.counts)


def test_a_replaced_sandbox_under_a_notice_is_previewed_as_the_pass_retires_it(warm, reconcile):
    """resume_failed is proved by its replacement, and its notice names that proof
    (REPLACEMENT). Once the notice is over the preview says `retire`, as the pass
    does. Failed while the preview built the decision's situation itself: it
    bound the notice to "" for a replacement proof and said `notice` (give one)."""
    env = f.EnvironmentFactory(retirement_mode="auto", notice_period=timedelta(hours=4))
    lease = warm(env=env, status=m.LeaseStatus.PENDING_CLEANUP, failure_reason="resume_failed")
    reconcile()
    r = m.Retirement.objects.get(lease=lease)
    assert (r.kind, r.stage) == (m.RetirementKind.RESUME_FAILED, m.Stage.NOTICED)
    assert r.notice_proof == REPLACEMENT
    later = timezone.now() + timedelta(hours=5)
    assert preview(env, Policy.of(env), now=later).current.counts == {"retire": 1}
    past = timezone.now() - timedelta(seconds=1)
    m.Retirement.objects.filter(pk=r.pk).update(retire_after=past, next_attempt_at=past)
    assert preview(env, Policy.of(env)).current.counts == {"retire": 1}
    reconcile()
    assert m.Retirement.objects.get(pk=r.pk).stage == m.Stage.RETIRED
