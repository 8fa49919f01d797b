"""Pausing Python's cyclic garbage collector while a batch is validated and
applied (the API view and load_events).

A 1,000-event batch allocates tens of thousands of containers (pydantic
models, the fold's rows, the statements' documents) that live until the batch
ends and then die by reference counting. With automatic collection on, the
collections during the batch promote them to the oldest generation, and every
few batches that triggers a full collection of the whole process (Django,
the app, every live object): 12-15 ms a batch, a sixth of its time, measured
through the API. Paused for the batch, they are simply freed; the next
automatic collection after it handles any cycle they left.

Process-wide, so nested and concurrent batches (threads) share one pause: the
collector is resumed when the last of them ends, and only if it was on when
the first began. Under steady overlapping batches (gunicorn's threads) that
moment may never come, so a batch that ends after the pause has lasted
MAX_PAUSE collects once itself: cycles are never left for ever.
"""

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE = 10.0  # seconds

_lock = threading.Lock()
_depth = 0
_resume = False
_since = 0.0


@contextmanager
def collection_paused() -> Iterator[None]:
    global _depth, _resume, _since
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            _since = time.monotonic()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        collect = False
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
            elif _depth > 0 and _resume and time.monotonic() - _since >= MAX_PAUSE:
                _since = time.monotonic()
                collect = True
        if collect:
            gc.collect()
