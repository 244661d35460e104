import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

SHARED = Path(os.environ.get("SPECWATCH_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared reference material not found at {path} (set SPECWATCH_SHARED)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return shared_path()
