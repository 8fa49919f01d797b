"""The console's own receipts (the reconciler's steps, the operator's approvals
and attestations) have one writer, sandboxes/receipts.py:write_receipt;
Paperclip's receipts arrive through ingest and the mirror."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_consoles_own_receipts_have_one_writer():
    writers = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "sandboxes").rglob("*.py")
        if "Receipt.objects.create(" in p.read_text()
    )
    assert writers == ["sandboxes/receipts.py"]
