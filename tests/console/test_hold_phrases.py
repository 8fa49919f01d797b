"""Every hold has its own words on the sandbox list (sandboxes/views/humanize.py):
a new HoldCode without a phrase would show as its bare code label."""

from types import SimpleNamespace

import pytest

from sandboxes.models import HoldCode
from sandboxes.rules.holds import HOLD_EXPLANATIONS
from sandboxes.views.humanize import _label, hold_phrase


@pytest.mark.parametrize("code", list(HoldCode), ids=str)
def test_each_hold_has_a_phrase_and_an_explanation(code):
    record = SimpleNamespace(operator_hold_reason="")
    phrase = hold_phrase(code, record)
    assert phrase and phrase != _label(code)
    assert HOLD_EXPLANATIONS[code]


def test_an_operator_hold_shows_the_operators_words():
    record = SimpleNamespace(operator_hold_reason="keep for the audit")
    assert hold_phrase(HoldCode.OPERATOR_HOLD, record).endswith("keep for the audit")
