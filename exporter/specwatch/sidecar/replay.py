"""`specwatch replay`: run a recording through the live sidecar's evaluation path.

The same Pipeline as `specwatch run`, fed from the file instead of HTTP: each recorded poll is
ingested at its recorded time, then every route and window is evaluated at that time when an
evaluation is due (Config.evaluation_period, as `specwatch run`), and one JSON line per evaluation
is printed (the keys of docs/architecture.md §4, null where there is no value).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from specwatch.base.jsonsafe import json_safe_record
from specwatch.config import Config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.evaluation import evaluation_record


class RecordingError(ValueError):
    pass


def read_recording(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise RecordingError(f"line {number}: not JSON") from None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("t"), (int, float))
            or not isinstance(entry.get("target"), str)
            or not ("text" in entry or "error" in entry)
        ):
            raise RecordingError(f'line {number}: expected {{"t", "target", "text"}}')
        yield entry


def replay(
    config: Config, lines: Iterable[str], pipeline: Pipeline | None = None, *, learn_targets: bool = False
) -> Iterator[dict[str, object]]:
    """learn_targets: take target names from the recording (replay without a config file)."""
    pipeline = pipeline or Pipeline(config)
    known = {t.name for t in config.targets}
    for entry in read_recording(lines):
        target = entry["target"]
        if target not in known:
            if not learn_targets:
                raise RecordingError(
                    f"target {target!r} in the recording is not configured ({', '.join(sorted(known))})"
                )
            pipeline.add_target(target)
            known.add(target)
        if "text" in entry:
            pipeline.ingest(target, float(entry["t"]), entry["text"])
        else:
            pipeline.ingest_error(target, float(entry["t"]), str(entry["error"]))
        if pipeline.evaluation_due(float(entry["t"])):
            for evaluation in pipeline.evaluate(float(entry["t"])):
                yield json_safe_record(evaluation_record(evaluation))


def replay_to(
    config: Config,
    lines: Iterable[str],
    out: IO[str],
    *,
    learn_targets: bool = False,
    pipeline: Pipeline | None = None,
) -> int:
    count = 0
    for record in replay(config, lines, pipeline, learn_targets=learn_targets):
        out.write(json.dumps(record) + "\n")
        count += 1
    return count
