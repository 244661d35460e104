"""Root of the test tree: the `support` helpers on the path, and the markers that keep a plain
`python -m pytest` to about a minute (CI runs everything with `-m ""`)."""

import sys
from pathlib import Path

import pytest

from specwatch.base.logsetup import reset_logging

TESTS = Path(__file__).resolve().parent
# Test helpers live in tests/support (import as `support.<module>`): a conftest is not importable
# by name once several directories have one.
sys.path.insert(0, str(TESTS))

SYSTEM = TESTS / "system"
#: Unit and deploy modules whose tests mostly start real processes (promtool per case, the CLI as a
#: subprocess, the demo for 20 s): `slow`, so the quick loop stays about a minute.
SLOW_MODULES = frozenset(
    TESTS / path
    for path in (
        "deploy/test_rules.py",
        "unit/serve/test_service.py",
        "unit/sim/test_sidecar.py",
    )
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/system runs real processes end to end: marked `system`."""
    for item in items:
        path = Path(str(item.path))
        if SYSTEM in path.parents:
            item.add_marker(pytest.mark.system)
        elif path in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _logging_defaults():
    """Commands run in-process configure logging for the whole process (a level filter, a
    stream): each test starts and ends with the defaults, so log assertions never depend on which
    test ran before."""
    reset_logging()
    yield
    reset_logging()
