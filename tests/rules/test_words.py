"""One format for every duration, time and size the console shows."""

from datetime import UTC, datetime, timedelta

import pytest

from sandboxes.rules.words import absolute, duration, relative, size, size_gib

NOW = datetime(2026, 12, 2, 0, 28, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (40, "40 s"),
        (timedelta(minutes=5), "5 min"),
        (timedelta(minutes=5, seconds=30), "5 min 30 s"),
        (timedelta(hours=2), "2 h"),
        (timedelta(days=1, hours=4), "1 d 4 h"),
        (timedelta(days=1, minutes=5), "1 d"),  # two largest units, the rest dropped
        (timedelta(hours=24), "1 d"),
        (1800.0, "30 min"),
        (2.5, "2.5 s"),
        (0, "0 s"),
        (None, "—"),
    ],
)
def test_a_duration_reads_the_same_everywhere(value, text):
    assert duration(value) == text


def test_relative_says_ago_or_in():
    assert relative(NOW - timedelta(seconds=20), NOW) == "20 s ago"
    assert relative(NOW + timedelta(seconds=40), NOW) == "in 40 s"
    assert relative(NOW + timedelta(milliseconds=300), NOW) == "now"
    assert relative(NOW - timedelta(days=2, hours=3), NOW) == "2 d 3 h ago"


def test_absolute_is_utc_to_the_second():
    from zoneinfo import ZoneInfo

    berlin = NOW.astimezone(ZoneInfo("Europe/Berlin"))
    assert absolute(berlin) == "2026-12-02 00:28:20 UTC"
    assert absolute(NOW.replace(tzinfo=None)) == "2026-12-02 00:28:20 UTC"


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (12, "12 B"),
        (2048, "2 KiB"),
        (12_000, "11.7 KiB"),
        (int(2.4 * 2**30), "2.4 GiB"),
        (150 * 2**30, "150 GiB"),
        (None, "unknown"),
    ],
)
def test_sizes_are_binary_units_for_people(n_bytes, text):
    assert size(n_bytes) == text


def test_a_tiny_reported_gib_is_not_a_long_float():
    """The local provider's disk of a few files: 0.000011444091796875 GiB."""
    assert size_gib(0.000011444091796875) == "12 KiB"
    assert size_gib(None) == "unknown"
