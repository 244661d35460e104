"""The whole-process peer of `specwatch replay`: prometheus_client parsing every payload of the same
recording, nothing else (no windows, no cost model, no output).

    python -m bench.pcloop RECORDING.jsonl

Reads the recording line by line as `specwatch replay` does (one JSON document per poll) and
materialises every family and sample of each payload with `text_string_to_metric_families`.
Prints the number of samples parsed, so the work cannot be skipped.
"""

from __future__ import annotations

import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main(path: str) -> int:
    samples = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            entry = json.loads(line)
            text = entry.get("text")
            if text is None:
                continue
            for family in text_string_to_metric_families(text):
                samples += len(family.samples)
    print(samples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
