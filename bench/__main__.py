"""`python -m bench`: run every benchmark, print the tables, write bench/results.json.

    python -m bench                  # everything (about 10-15 min on 2 shared cores)
    python -m bench --smoke          # the cheap version of every table (CI; no goal is asserted)
    python -m bench --only parse,http
    python -m bench --markdown out.md   # the tables as markdown too (docs/benchmarks.md is built from them)

Parts: parse (1), replay (2), http (3), detection (4, 5: delay, false changes, ITL accuracy), scaling (6),
evaluate (7: one route-window through derive, cost model and verdict), attack (8: the HTTP front under
hostile clients: a scraper's success and peak RSS).
fleet (fleet mode's CPU and queries per poll vs replicas; needs prometheus and promtool), page (the live
page's render time at 5, 30 and 60 minutes of plot history).
Recordings and simulator payloads are cached in bench/.cache/ (gitignored); delete it to rebuild.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from .common import REPO, machine

PARTS = ("parse", "evaluate", "scaling", "replay", "http", "attack", "detection", "fleet", "page")
TABLE_KEYS = (
    "parse_cost",
    "evaluate",
    "scaling",
    "replay",
    "http",
    "attack",
    "detection",
    "false_changes",
    "accuracy",
    "fleet",
    "page_render",
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="small inputs, one round: every table, quickly (CI)")
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    ap.add_argument("--out", default=str(REPO / "bench" / "results.json"))
    ap.add_argument("--markdown", default=None, help="also write the tables as markdown to this file")
    args = ap.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(only) - set(PARTS)
    if unknown:
        ap.error(f"unknown part(s): {', '.join(sorted(unknown))}")

    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    results: dict = {
        "mode": "smoke" if args.smoke else "full",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "parts": {},
        "tables": {},
        "errors": {},
    }
    tables = []

    def part(name, fn):
        if name not in only:
            return None
        t0 = time.monotonic()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        try:
            made, data = fn()
        except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others' tables
            traceback.print_exc()
            results["errors"][name] = f"{type(exc).__name__}: {exc}"
            return None
        made = made if isinstance(made, list) else [made]
        for table in made:
            tables.append(table)
            results["tables"][table.key] = table.as_dict()
            print("\n" + table.markdown() + "\n", flush=True)
        results["parts"][name] = {"seconds": round(time.monotonic() - t0, 1), **data}
        return data

    from . import detection, evaluate, fleet, http_attack, http_latency, page_render, parse_cost, replay_proc

    part("parse", lambda: parse_cost.run_parse_cost(args.smoke))
    part("evaluate", lambda: evaluate.run_evaluate(args.smoke))
    part("scaling", lambda: parse_cost.run_scaling(args.smoke))
    replay_data = part("replay", lambda: replay_proc.run_replay(args.smoke))
    part("http", lambda: http_latency.run_http(args.smoke))
    part("attack", lambda: http_attack.run_attack(args.smoke))
    stable_output = (replay_data or {}).get("specwatch_output")
    part("detection", lambda: detection.run_detection(args.smoke, stable_output))
    part("fleet", lambda: fleet.run_fleet(args.smoke))
    part("page", lambda: page_render.run_page(args.smoke))

    results["machine"]["loadavg_end"] = os.getloadavg()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    if args.markdown:
        m = results["machine"]
        head = (
            f"Machine: {m['cpu']}, {m['cpus']} CPUs, {m['memory']} RAM, Linux {m['kernel']}, Python {m['python']}, "
            f"prometheus_client {m['prometheus_client']}, {m['prometheus']}; load average "
            f"{m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at the end "
            f"({results['mode']} run, {results['started']})."
        )
        Path(args.markdown).write_text(head + "\n\n" + "\n\n".join(t.markdown() for t in tables) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    if results["errors"]:
        print(f"parts that failed: {', '.join(results['errors'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
