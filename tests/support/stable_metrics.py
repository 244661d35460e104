"""The stable families' golden list (tests/golden/stable_metrics.txt), after kube-state-metrics'
stable_metrics_test: a stable family (contract.py's stability column) is a promise to every alert,
dashboard and query built on it, so removing, renaming, retyping or relabelling one fails
tests/unit/export/test_stable_metrics.py; experimental families are free to change.

    python tests/support/stable_metrics.py --write   # after an intended, announced breaking change
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specwatch.export import contract

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "stable_metrics.txt"


def stable_changes(held: str, now: str) -> list[str]:
    """What differs between the golden list and the contract's stable families, one line each."""
    held_lines, now_lines = set(held.splitlines()), set(now.splitlines())
    now_names = {line.split()[0] for line in now_lines}
    changed = [
        f"stable family changed: {line!r} is {'no longer stable as held' if line.split()[0] in now_names else 'gone'}"
        " (removing, renaming, retyping or relabelling a stable family is a breaking change: list it in"
        " CHANGELOG.md and rewrite the golden with tests/support/stable_metrics.py --write)"
        for line in sorted(held_lines - now_lines)
    ]
    added = [
        f"stable family not in the golden list: {line!r} (rewrite it with tests/support/stable_metrics.py --write)"
        for line in sorted(now_lines - held_lines)
    ]
    return changed + added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden list from the contract")
    args = parser.parse_args()
    if args.write:
        GOLDEN.write_text(contract.stable_list())
        return 0
    changes = stable_changes(GOLDEN.read_text(), contract.stable_list())
    print("\n".join(changes) or "the stable families match their golden list")
    return 1 if changes else 0


if __name__ == "__main__":
    sys.exit(main())
