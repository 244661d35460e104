"""Where the repository and its test fixtures are. Everything a test reads lives in the repository."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def fixture_path(*parts: str) -> Path:
    """A file or folder under tests/fixtures; a missing one is a broken checkout, so it fails loudly."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"test fixture missing from the repository: {path}")
    return path
