"""Money reads true: unknown only when unknown, never "$0.00" for a small known cost."""

from decimal import Decimal

from sandboxes.costs import money


def test_money_is_rounded_to_cents():
    assert money(Decimal("1.3249")) == "$1.32"
    assert money(Decimal("1234.5")) == "$1,234.50"


def test_a_known_cost_under_a_cent_is_not_zero():
    assert money(Decimal("0.0003")) == "< $0.01"
    assert money(Decimal("0.0003"), "EUR") == "< €0.01"


def test_zero_is_zero_and_none_is_unknown():
    assert money(Decimal(0)) == "$0.00"
    assert money(None) == "unknown"
