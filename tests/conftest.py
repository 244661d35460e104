import sys
from pathlib import Path

# Test helpers live in tests/support (import as `support.<module>`): a conftest is not importable
# by name once several directories have one.
sys.path.insert(0, str(Path(__file__).resolve().parent))
