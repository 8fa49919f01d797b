"""The retirement window (docs/rules.md, the retirement window): a pure rule over
days, local start and end and an IANA time zone. No database."""

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxes.rules.codes import HoldCode, RetirementKind
from sandboxes.rules.holds import (
    compute_holds,
    explain,
    holds_change_at,
    phrase,
    window_opens,
)
from sandboxes.rules.window import (
    Window,
    WindowError,
    days_words,
    parse_days,
    stored_days,
    window_from,
)

from .test_holds import CLEAR

BERLIN = ZoneInfo("Europe/Berlin")
OFFICE = window_from("Europe/Berlin", "mon,tue,wed,thu,fri", time(9), time(17))
assert OFFICE is not None


def berlin(*args) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


# --- open or closed, and when it opens ---------------------------------------------------


def test_open_on_working_hours_and_closed_outside():
    assert OFFICE.is_open(berlin(2026, 12, 2, 9, 0))  # Wednesday, the opening minute
    assert OFFICE.is_open(berlin(2026, 12, 2, 16, 59, 59))
    assert not OFFICE.is_open(berlin(2026, 12, 2, 17, 0))  # the end is not inside
    assert not OFFICE.is_open(berlin(2026, 12, 2, 8, 59))
    assert not OFFICE.is_open(berlin(2026, 12, 5, 12, 0))  # Saturday


def test_friday_evening_opens_on_monday_morning():
    now = berlin(2026, 12, 4, 17, 30)  # Friday
    assert OFFICE.next_opening(now) == berlin(2026, 12, 7, 9, 0)
    assert OFFICE.opens_words(now) == "Mon 09:00"
    assert OFFICE.next_change(now) == berlin(2026, 12, 7, 9, 0)


def test_an_open_window_opens_now_and_changes_at_its_close():
    now = berlin(2026, 12, 2, 10, 0)
    assert OFFICE.next_opening(now) == now
    assert OFFICE.next_change(now) == berlin(2026, 12, 2, 17, 0)


def test_the_week_wraps_from_sunday_to_monday():
    sundays = window_from("UTC", "sun", time(22), time(23))
    assert sundays is not None
    now = datetime(2026, 12, 7, 0, 0, tzinfo=UTC)  # Monday, just after
    assert sundays.next_opening(now) == datetime(2026, 12, 13, 22, 0, tzinfo=UTC)


def test_the_opening_follows_the_clocks_across_spring_forward():
    # Berlin goes from +01:00 to +02:00 on Sunday 2027-03-28: Monday 09:00 is
    # 07:00 UTC, not 08:00.
    now = berlin(2027, 3, 27, 12, 0)
    assert OFFICE.next_opening(now) == datetime(2027, 3, 29, 7, 0, tzinfo=UTC)
    assert OFFICE.opens_words(now) == "Mon 09:00"


def test_the_opening_follows_the_clocks_across_fall_back():
    # Back to +01:00 on Sunday 2026-10-25: Monday 09:00 is 08:00 UTC.
    now = berlin(2026, 10, 24, 12, 0)
    assert OFFICE.next_opening(now) == datetime(2026, 10, 26, 8, 0, tzinfo=UTC)


def test_a_start_the_clock_skips_opens_when_the_clock_has_jumped():
    # 02:30 does not exist in Berlin on 2027-03-28: the window opens at 03:30 CEST.
    night = window_from("Europe/Berlin", "sun", time(2, 30), time(4, 0))
    assert night is not None
    assert night.next_opening(berlin(2027, 3, 28, 0, 0)) == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)
    assert night.is_open(datetime(2027, 3, 28, 1, 45, tzinfo=UTC))


def test_a_window_spanning_midnight_is_open_into_the_next_day():
    nights = window_from("Europe/Berlin", "fri", time(22), time(6))
    assert nights is not None
    assert nights.is_open(berlin(2026, 12, 4, 23, 0))  # Friday night
    assert nights.is_open(berlin(2026, 12, 5, 5, 59))  # Saturday early: Friday's window
    assert not nights.is_open(berlin(2026, 12, 5, 6, 0))
    assert not nights.is_open(berlin(2026, 12, 5, 23, 0))  # Saturday is not a listed day
    assert nights.next_opening(berlin(2026, 12, 5, 7, 0)) == berlin(2026, 12, 11, 22, 0)


def test_an_end_equal_to_the_start_keeps_it_open_a_whole_day():
    weekend = window_from("UTC", "sat,sun", time(0), time(0))
    assert weekend is not None
    assert weekend.is_open(datetime(2026, 12, 5, 0, 0, tzinfo=UTC))
    assert weekend.is_open(datetime(2026, 12, 6, 23, 59, tzinfo=UTC))
    assert not weekend.is_open(datetime(2026, 12, 7, 0, 0, tzinfo=UTC))


# --- settings: whole or not at all, each refusal naming its field -------------------------


def test_all_empty_is_any_time():
    assert window_from("", "", None, None) is None
    assert window_from("  ", [], None, None) is None


@pytest.mark.parametrize(
    "settings_, field, words",
    [
        (("Europe/Berln", "mon", time(9), time(17)), "time_zone", "unknown time zone"),
        (("../../etc/passwd", "mon", time(9), time(17)), "time_zone", "unknown time zone"),
        (("", "mon", time(9), time(17)), "time_zone", "needs a time zone"),
        (("UTC", "", time(9), time(17)), "window_days", "needs a time zone"),
        (("UTC", "mon,funday", time(9), time(17)), "window_days", "is not a day"),
        (("UTC", "mon", None, time(17)), "window_start", "needs"),
        (("UTC", "mon", time(9), None), "window_end", "needs"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(settings_, field, words):
    with pytest.raises(WindowError) as caught:
        window_from(*settings_)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert words in str(caught.value)


def test_the_unknown_time_zone_is_named_as_typed():
    with pytest.raises(WindowError, match=r"^time_zone: unknown time zone 'Europe/Berln'$"):
        window_from("Europe/Berln", "mon", time(9), time(17))


def test_days_in_words_and_as_stored():
    assert days_words(parse_days("mon,tue,wed,thu,fri")) == "Mon–Fri"
    assert days_words(parse_days(["sat", "sun"])) == "Sat, Sun"
    assert days_words(parse_days("mon,wed,fri")) == "Mon, Wed, Fri"
    assert stored_days({4, 0, 2}) == "mon,wed,fri"
    assert OFFICE.describe() == "Mon–Fri 09:00–17:00 Europe/Berlin"


# --- the hold -----------------------------------------------------------------------------

SATURDAY = berlin(2026, 12, 5, 12, 0)
WEDNESDAY = berlin(2026, 12, 2, 12, 0)
IN_OFFICE = replace(CLEAR, window=OFFICE)


@pytest.mark.parametrize(
    "kind",
    [
        RetirementKind.ABANDONED_WARM,
        RetirementKind.CLOSED_RESTORE_SOURCE,
        RetirementKind.DONE_TASK_WARM,
        RetirementKind.RESUME_FAILED,
    ],
)
def test_a_closed_window_holds_every_kind_that_destroys(kind):
    assert compute_holds(IN_OFFICE, kind, now=SATURDAY) == [HoldCode.OUTSIDE_WINDOW]
    assert compute_holds(IN_OFFICE, kind, now=WEDNESDAY) == []
    assert window_opens(IN_OFFICE, [HoldCode.OUTSIDE_WINDOW], SATURDAY) == berlin(2026, 12, 7, 9, 0)


@pytest.mark.parametrize(
    "kind", [RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN, RetirementKind.SUPERSEDED_RUNNING_WARM]
)
def test_a_stop_is_not_a_destroy_and_the_window_does_not_limit_it(kind):
    assert compute_holds(IN_OFFICE, kind, now=SATURDAY) == []
    assert holds_change_at(IN_OFFICE, kind, now=SATURDAY) is None


def test_the_opening_is_the_wait_only_when_the_window_alone_holds():
    both = [HoldCode.OPERATOR_HOLD, HoldCode.OUTSIDE_WINDOW]
    assert window_opens(IN_OFFICE, both, SATURDAY) is None  # the operator's hold follows data
    assert window_opens(CLEAR, [HoldCode.OUTSIDE_WINDOW], SATURDAY) is None


def test_the_listing_goes_stale_when_the_window_opens_or_closes():
    kind = RetirementKind.ABANDONED_WARM
    assert holds_change_at(IN_OFFICE, kind, now=SATURDAY) == berlin(2026, 12, 7, 9, 0)
    assert holds_change_at(IN_OFFICE, kind, now=WEDNESDAY) == berlin(2026, 12, 2, 17, 0)
    assert holds_change_at(CLEAR, kind, now=SATURDAY) is None


def test_the_line_names_the_window_and_the_phrase_when_it_opens():
    reasons = explain([HoldCode.OUTSIDE_WINDOW], IN_OFFICE)
    assert reasons[HoldCode.OUTSIDE_WINDOW] == (
        "Outside the environment's retirement window (Mon–Fri 09:00–17:00 Europe/Berlin): "
        "destroys and owner notices wait for it."
    )
    assert phrase(HoldCode.OUTSIDE_WINDOW, window_opens=OFFICE.opens_words(SATURDAY)) == (
        "outside the retirement window (opens Mon 09:00)"
    )


# --- properties ---------------------------------------------------------------------------

ZONES = st.sampled_from(
    [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "America/Santiago",
        "Australia/Lord_Howe",  # a half-hour DST change
        "Asia/Kathmandu",
        "Pacific/Apia",  # skipped a whole day in 2011
        "America/St_Johns",
    ]
)
TIMES = st.times().map(lambda t: t.replace(second=0, microsecond=0))
WINDOWS = st.builds(
    Window,
    time_zone=ZONES,
    days=st.frozensets(st.integers(0, 6), min_size=1),
    start=TIMES,
    end=TIMES,
)
MOMENTS = st.datetimes(
    min_value=datetime(2005, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(window=WINDOWS, now=MOMENTS)
def test_the_next_opening_is_open_and_nothing_before_it_is(window, now):
    opens = window.next_opening(now)
    assert opens >= now
    assert window.is_open(opens)
    if opens > now:
        for fraction in (0, 0.25, 0.5, 0.75):
            assert not window.is_open(now + (opens - now) * fraction)
        assert not window.is_open(opens - timedelta(microseconds=1))
    assert opens - now <= timedelta(days=15)


@settings(max_examples=300, deadline=None)
@given(window=WINDOWS, now=MOMENTS)
def test_nothing_changes_before_the_next_change(window, now):
    change = window.next_change(now)
    assert change > now
    was = window.is_open(now)
    for fraction in (0.25, 0.5, 0.999):
        assert window.is_open(now + (change - now) * fraction) == was


@settings(max_examples=300, deadline=None)
@given(
    days=st.frozensets(st.integers(0, 6), min_size=1),
    start=TIMES,
    end=TIMES,
    now=MOMENTS,
)
def test_without_clock_changes_it_is_the_wall_clock_rule(days, start, end, now):
    """In UTC (no DST) the window is exactly what the settings say on the wall."""
    window = Window("UTC", days, start, end)
    wall = now.time()
    today, yesterday = now.weekday(), (now.weekday() - 1) % 7
    if end > start:
        expected = today in days and start <= wall < end
    else:  # spans midnight (an end equal to the start: 24 hours)
        expected = (today in days and wall >= start) or (yesterday in days and wall < end)
    assert window.is_open(now) == expected
