"""Doing the next step's Python while this one waits on the database.

load_events reads and validates the next batch of lines while the current
one is applied: psycopg frees the interpreter while it waits on the server,
so on a machine with a core to spare the two overlap (the server on one core,
the next batch's validation on the other): 10-15 % off a 30,000-event file
(2.36-2.81 s against 2.14-2.65 s, three runs each, load 1). Only ever one
step ahead: memory stays one batch larger.

Tried for the mirror's pages too (read and translated ahead): no gain in the
same runs, where a page's write is many short statements and the thread's
Python takes the interpreter from the writer as each returns; nor written
behind by a thread (30,000 leases: 17.3-18.7 s against 14.9 s inline, switch
intervals 0.5-50 ms). The mirror uses more processes instead
(sandboxes/mirror/sync.py): no interpreter to share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def read_ahead(produce: Callable[[], T | None], *, name: str) -> Iterator[T]:
    """The values `produce()` returns, until it returns None; each is produced
    by a thread of its own while the caller handles the one before. What
    `produce` raises, the caller gets where that value would have come.

    `produce` runs in that thread only, one call at a time: what it reads
    (a cursor, a file) must be used by nothing else meanwhile."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) as thread:
        coming = thread.submit(produce)
        while (value := coming.result()) is not None:
            coming = thread.submit(produce)
            yield value
