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
