"""Write docs/metrics.md's metric list from the metric contract's table (specwatch/export/contract.py).

Only the lines between `<!-- metrics:begin -->` and `<!-- metrics:end -->` are replaced.

    python tools/gen_metrics_doc.py           # rewrite docs/metrics.md
    python tools/gen_metrics_doc.py --check   # exit 1 on drift (CI)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from _generated import between, regenerate

from specwatch.export.contract import DEPLOYMENT, FAMILIES

BEGIN, END = "<!-- metrics:begin -->", "<!-- metrics:end -->"


def metric_table() -> str:
    """The contract as the Markdown table docs/metrics.md carries between its metrics markers."""
    rows = ["| name | type | stability | labels | modes | help |", "|---|---|---|---|---|---|"]
    for family in FAMILIES:
        names = ", ".join(f"`{name}`" for name in family.sample_names())
        keyed = (*family.labels(), *(["prometheus.deployment_labels"] if DEPLOYMENT in family.key else []))
        labels = ", ".join(f"`{label}`" for label in keyed) or "—"
        modes = ", ".join(mode for mode in ("sidecar", "fleet") if mode in family.modes)
        rows.append(
            f"| {names} | {family.type} | {family.stability} | {labels} | {modes} | {family.help.replace('|', '/')} |"
        )
    return "\n".join(rows)


def render(text: str) -> str:
    return between(text, BEGIN, END, metric_table())


def main(argv: Sequence[str] | None = None) -> int:
    return regenerate(argv, script="gen_metrics_doc.py", default="docs/metrics.md", what="metric list", render=render)


if __name__ == "__main__":
    sys.exit(main())
