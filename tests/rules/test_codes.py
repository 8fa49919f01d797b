"""The rules' closed sets hold the values the models store (sandboxes/rules/codes.py)."""

import pytest

from sandboxes.models import choices
from sandboxes.rules import codes

ENUMS = [
    "HoldCode",
    "RetirementKind",
    "RetirementMode",
    "Stage",
    "ReceiptKind",
    "LeaseStatus",
    "SaveState",
    "Disposition",
]


@pytest.mark.parametrize("name", ENUMS)
def test_each_set_has_the_models_values_in_their_order(name):
    assert [m.value for m in getattr(codes, name)] == getattr(choices, name).values


@pytest.mark.parametrize("name", ["STAGES_CLOSED", "RUN_LIVE", "ISSUE_CLOSED"])
def test_each_group_is_the_models_group(name):
    assert list(getattr(codes, name)) == list(getattr(choices, name))


def test_a_rules_member_is_the_stored_value():
    assert codes.HoldCode.RETENTION == choices.HoldCode.RETENTION == "retention"
    assert {codes.Stage.HELD: 1}.get(choices.Stage.HELD) == 1
