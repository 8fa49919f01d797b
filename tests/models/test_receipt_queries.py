"""The questions asked of receipts (`Receipt.objects`): one definition each,
shared by the destroy gate, the planner, the proof rule, the policy preview,
the approvals queue, a sandbox's page and the API."""

import pytest

from sandboxes.models import Receipt, Retirement
from sandboxes.models.choices import ReceiptKind, Stage
from sandboxes.rules.proof import PROOF_KINDS
from tests.factories import EnvironmentLeaseFactory, ReceiptFactory, RetirementFactory

pytestmark = pytest.mark.django_db


def _ids(qs) -> set:
    return set(qs.values_list("pk", flat=True))


def _every_kind(record: Retirement) -> dict[str, Receipt]:
    return {
        kind: ReceiptFactory(lease=record.lease, retirement=record, kind=kind, actor="system")
        for kind in ReceiptKind.values
    }


def test_proof_of_is_the_proof_and_approval_receipts_of_the_records_named():
    record, other = RetirementFactory(), RetirementFactory()
    mine, theirs = _every_kind(record), _every_kind(other)
    ReceiptFactory(lease=record.lease)  # Paperclip's own stop: no record's proof
    wanted = {*PROOF_KINDS, ReceiptKind.APPROVAL}
    expected = {r.pk for kind, r in mine.items() if kind in wanted}
    assert _ids(Receipt.objects.proof_of([record])) == expected
    assert _ids(Receipt.objects.proof_of([record.pk])) == expected
    both = expected | {r.pk for kind, r in theirs.items() if kind in wanted}
    assert _ids(Receipt.objects.proof_of(Retirement.objects.all())) == both
    assert _ids(Receipt.objects.proof_of([])) == set()


def test_proof_of_an_open_records_queryset_leaves_the_closed_ones_out():
    open_record = RetirementFactory()
    closed = RetirementFactory(stage=Stage.RETIRED)
    kept = ReceiptFactory(lease=open_record.lease, retirement=open_record, kind="salvage_compare")
    ReceiptFactory(lease=closed.lease, retirement=closed, kind="salvage_compare")
    assert _ids(Receipt.objects.proof_of(Retirement.objects.open())) == {kept.pk}


def test_proof_of_is_oldest_first():
    record = RetirementFactory()
    receipts = [
        ReceiptFactory(lease=record.lease, retirement=record, kind="salvage_compare")
        for _ in range(3)
    ]
    listed = list(Receipt.objects.proof_of([record]))
    assert listed == sorted(receipts, key=lambda r: (r.confirmed_at, r.created_at))


def test_of_sandbox_is_every_receipt_naming_it_through_any_lease_of_its_provider():
    first = EnvironmentLeaseFactory(provider_lease_id="sbx-shared")
    second = EnvironmentLeaseFactory(provider_lease_id="sbx-shared")
    elsewhere = EnvironmentLeaseFactory(
        provider_lease_id="sbx-shared", environment__provider="daytona"
    )
    record = RetirementFactory(lease=first)
    named = {
        ReceiptFactory(lease=first).pk,
        ReceiptFactory(lease=second).pk,
        ReceiptFactory(lease=first, retirement=record, kind="salvage_compare").pk,
    }
    ReceiptFactory(lease=elsewhere)  # the same id at another provider: another sandbox
    ReceiptFactory()  # another sandbox
    assert first.provider == "local" and elsewhere.provider == "daytona"
    assert _ids(Receipt.objects.of_sandbox("local", "sbx-shared")) == named
