"""When a kept sandbox goes, in words (sandboxes/rules/countdown.py): the text of
each countdown, the urgency that colours it (amber under a day, red under an
hour, as Coder's deletion banner turns red near the end) and its words."""

from datetime import UTC, datetime, timedelta

import pytest

from sandboxes.rules.codes import HoldCode, Stage
from sandboxes.rules.countdown import countdown, span

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (timedelta(seconds=45), "45 s"),
        (timedelta(minutes=4, seconds=59), "4 min 59 s"),
        (timedelta(hours=2, minutes=30), "2 h 30 min"),
        (timedelta(hours=5, minutes=30), "5 h 30 min"),
        (timedelta(days=1, hours=4, minutes=10), "1 d 4 h"),
        (timedelta(days=2), "2 d"),
        (timedelta(seconds=-5), "0 s"),
    ],
)
def test_a_countdown_reads_in_the_one_duration_format(delta, words):
    assert span(delta) == words


def test_a_notice_counts_down_to_its_end():
    c = countdown(stage=Stage.NOTICED, holds=[], now=NOW, retire_after=NOW + timedelta(hours=3))
    assert c.text == "retires after the notice, in 3 h"
    assert c.urgency == "soon" and c.urgency_words == "under a day"


def test_a_failed_step_counts_down_to_its_next_attempt():
    c = countdown(stage=Stage.FAILED, holds=[], now=NOW, next_attempt_at=NOW + timedelta(minutes=4))
    assert c.text == "next attempt in 4 min"
    assert c.urgency == "now" and c.urgency_words == "under an hour"


def test_the_wait_for_approval_counts_up_and_is_never_urgent():
    c = countdown(
        stage=Stage.AWAITING_APPROVAL, holds=[], now=NOW, awaiting_since=NOW - timedelta(days=2)
    )
    assert c.text == "awaiting approval for 2 d"
    assert c.urgency == "" and c.urgency_words == ""


def test_retention_counts_down_and_is_calm_beyond_a_day():
    ends = NOW + timedelta(hours=5)
    c = countdown(stage=Stage.HELD, holds=[HoldCode.RETENTION], now=NOW, retention_ends=ends)
    assert c.text == "retention ends in 5 h" and c.urgency == "soon"
    far = countdown(
        stage=Stage.HELD,
        holds=[HoldCode.RETENTION],
        now=NOW,
        retention_ends=NOW + timedelta(days=3),
    )
    assert far.text == "retention ends in 3 d" and far.urgency == ""


def test_an_operator_hold_counts_down_to_its_end():
    c = countdown(
        stage=Stage.HELD,
        holds=[HoldCode.RETENTION, HoldCode.OPERATOR_HOLD],
        now=NOW,
        hold_until=NOW + timedelta(minutes=30),
        retention_ends=NOW + timedelta(hours=5),
    )
    assert c.text == "hold ends in 30 min" and c.urgency == "now"


def test_a_moment_already_passed_says_what_happens_next():
    c = countdown(stage=Stage.NOTICED, holds=[], now=NOW, retire_after=NOW - timedelta(minutes=1))
    assert c.text == "notice over: retires on the next pass" and c.urgency == "now"


def test_nothing_to_count_is_no_countdown():
    assert countdown(stage=Stage.LISTED, holds=[], now=NOW) is None
    # A retention hold without a known end says nothing rather than guess.
    assert countdown(stage=Stage.HELD, holds=[HoldCode.RETENTION], now=NOW) is None
