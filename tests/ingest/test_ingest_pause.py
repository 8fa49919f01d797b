"""The collector pause around a batch (sandboxes/ingest/pause.py) always hands
the collector back as it found it, however pauses nest or overlap."""

import gc
import threading

from sandboxes.ingest.pause import collection_paused


def test_a_pause_resumes_the_collector_when_it_ends_even_on_error():
    assert gc.isenabled()
    try:
        with collection_paused():
            assert not gc.isenabled()
            raise ValueError
    except ValueError:
        pass
    assert gc.isenabled()


def test_overlapping_pauses_resume_only_when_the_last_one_ends():
    started, release = threading.Event(), threading.Event()

    def other_batch():
        with collection_paused():
            started.set()
            release.wait(5)

    thread = threading.Thread(target=other_batch)
    with collection_paused():
        thread.start()
        started.wait(5)
    assert not gc.isenabled()  # the other batch is still running
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_collector_someone_turned_off_stays_off():
    gc.disable()
    try:
        with collection_paused(), collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pause_kept_up_by_overlapping_batches_still_collects(monkeypatch):
    """Steady overlapping batches never bring the pause to an end: a batch that
    ends after MAX_PAUSE collects once, and the clock starts again."""
    from sandboxes.ingest import pause

    clock = [1000.0]
    collections = []
    monkeypatch.setattr(pause.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(pause.gc, "collect", lambda *a: collections.append(clock[0]))
    with collection_paused():  # a long-running batch on another thread
        with collection_paused():
            clock[0] += pause.MAX_PAUSE - 1
        assert collections == []
        with collection_paused():
            clock[0] += 2
        assert collections == [clock[0]]
        with collection_paused():
            clock[0] += 1
        assert len(collections) == 1  # not again until another MAX_PAUSE
        assert not gc.isenabled()
    assert gc.isenabled()
