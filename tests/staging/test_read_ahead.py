"""sandboxes/read_ahead.py: the next value is produced while the caller handles
this one, in order, one ahead; what the producer raises reaches the caller."""

import threading

import pytest

from sandboxes.read_ahead import read_ahead


def counter(limit, started=None):
    values = iter(range(1, limit + 1))

    def produce():
        value = next(values, None)
        if started is not None and value is not None:
            started[value].set()
        return value

    return produce


def test_values_come_in_order_until_none():
    assert list(read_ahead(counter(5), name="t")) == [1, 2, 3, 4, 5]
    assert list(read_ahead(counter(0), name="t")) == []


def test_the_next_value_is_produced_while_the_caller_handles_this_one():
    started = {n: threading.Event() for n in range(1, 4)}
    for value in read_ahead(counter(3, started), name="t"):
        if value < 3:
            # Not asked for yet: a producer called only on demand would never
            # set it while the caller is here.
            assert started[value + 1].wait(timeout=5), f"{value + 1} was not produced ahead"


def test_only_one_value_ahead():
    made = []

    def produce():
        made.append(len(made) + 1)
        return made[-1] if len(made) <= 10 else None

    values = read_ahead(produce, name="t")
    assert next(values) == 1
    threading.Event().wait(0.2)  # time enough for a runaway producer
    assert made == [1, 2]
    values.close()


def test_what_the_producer_raises_reaches_the_caller_in_its_place():
    produced = iter([1, 2])

    def produce():
        value = next(produced, None)
        if value is None:
            raise ValueError("line 3 is not UTF-8")
        return value

    got = []
    with pytest.raises(ValueError, match="line 3"):
        for value in read_ahead(produce, name="t"):
            got.append(value)
    assert got == [1, 2]


def test_a_caller_that_stops_early_leaves_no_thread_running():
    before = threading.active_count()
    values = read_ahead(counter(100), name="t")
    assert next(values) == 1
    values.close()
    assert threading.active_count() == before
