"""Where the repository and the shared reference material are (shared/ sits beside the clone in CI)."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("SPECWATCH_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared reference material not found at {path} (set SPECWATCH_SHARED)")
    return path
