"""The live soak test spends about 100 s waiting on real time at a few percent of one core: its
soak starts as soon as the session's tests are collected and runs beside the tests before it; the
test reads its result (the same soak, the same criteria)."""

from __future__ import annotations

import pytest

from .soakrun import Soak, live_soak_args

LIVE_SOAK_TEST = "test_live_soak_of_specwatch_run_against_the_simulated_vllm_at_fast_polls"
EARLY_LIVE_SOAK = pytest.StashKey[Soak]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(item.name == LIVE_SOAK_TEST for item in session.items):
        return
    args, timeout = live_soak_args()
    soak = Soak(*args, timeout=timeout)
    session.config.stash[EARLY_LIVE_SOAK] = soak
    session.config.add_cleanup(soak.stop)


@pytest.fixture
def live_soak(pytestconfig: pytest.Config) -> Soak:
    """The live soak started at collection (one started now where there was none)."""
    soak = pytestconfig.stash.get(EARLY_LIVE_SOAK, None)
    if soak is None:
        args, timeout = live_soak_args()
        soak = Soak(*args, timeout=timeout)
        pytestconfig.add_cleanup(soak.stop)
    return soak
