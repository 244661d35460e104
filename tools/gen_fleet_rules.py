"""Write rules/specwatch-fleet-recording.yaml from fleet mode's own reads (specwatch/fleet/recorded.py).

python tools/gen_fleet_rules.py           # rewrite rules/specwatch-fleet-recording.yaml
python tools/gen_fleet_rules.py --check   # exit 1 on drift (CI)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from _generated import regenerate

from specwatch.fleet import recorded


def main(argv: Sequence[str] | None = None) -> int:
    return regenerate(
        argv,
        script="gen_fleet_rules.py",
        default="rules/specwatch-fleet-recording.yaml",
        what="fleet recording rules",
        render=lambda _current: recorded.render(),
    )


if __name__ == "__main__":
    sys.exit(main())
