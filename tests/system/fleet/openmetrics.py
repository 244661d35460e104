"""A specwatch recording -> OpenMetrics text with timestamps, for `promtool tsdb create-blocks-from
openmetrics`: what Prometheus would have stored had it scraped the recorded payloads at their times."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path


def recording_to_openmetrics(
    recordings: Iterable[tuple[Path, dict[str, str]]], out: Path, prefix: str = "vllm:"
) -> int:
    """Each recording's polls become samples at the poll time, with the given target labels added
    (Prometheus adds instance and job on scrape). Families are written contiguously, as OpenMetrics
    requires; every sample name is its own untyped family (PromQL does not read types)."""
    by_name: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for path, target_labels in recordings:
        extra = ",".join(f'{k}="{v}"' for k, v in sorted(target_labels.items()))
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "text" not in entry:
                continue
            t = float(entry["t"])
            for sample in entry["text"].splitlines():
                if not sample.startswith(prefix):
                    continue
                series, value = sample.rsplit(" ", 1)
                name, brace, labels = series.partition("{")
                if name.endswith("_created"):
                    continue
                labels = labels[:-1] if brace else ""
                merged = f"{extra},{labels}" if labels else extra
                by_name[name].append((t, f"{name}{{{merged}}}", value))
    count = 0
    with out.open("w") as handle:
        for name in sorted(by_name):
            handle.write(f"# TYPE {name} unknown\n")
            for t, series, value in sorted(by_name[name], key=lambda s: (s[1], s[0])):
                handle.write(f"{series} {value} {t:.3f}\n")
                count += 1
        handle.write("# EOF\n")
    return count
