"""serve.service.Wake: what the poll thread sleeps on between ticks (a binary semaphore)."""

from __future__ import annotations

import threading
import time

from specwatch.serve.service import Wake


def test_a_wait_with_nothing_set_sleeps_its_timeout_and_says_so():
    wake = Wake()
    started = time.monotonic()
    assert wake.wait(0.05) is False
    assert time.monotonic() - started >= 0.04


def test_a_set_before_the_wait_is_kept_until_the_wait_takes_it():
    wake = Wake()
    wake.set()
    assert wake.wait(5.0) is True  # at once: no 5 s sleep
    assert wake.wait(0.0) is False  # taken: cleared


def test_two_sets_before_a_wait_wake_it_once_and_neither_raises():
    wake = Wake()
    wake.set()
    wake.set()
    assert wake.wait(0.0) is True
    assert wake.wait(0.0) is False


def test_a_set_from_another_thread_ends_the_sleep_early():
    wake = Wake()
    threading.Timer(0.05, wake.set).start()
    started = time.monotonic()
    assert wake.wait(10.0) is True
    assert time.monotonic() - started < 5.0


def test_a_timeout_past_the_platform_maximum_is_capped_not_refused():
    wake = Wake()
    wake.set()
    assert wake.wait(float(threading.TIMEOUT_MAX) * 10) is True
