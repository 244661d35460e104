"""The outputs a behaviour-preserving change must leave byte-identical, and their digests.

Every bundled simulator scenario is polled through the sidecar's Pipeline at a 5 s interval (a
fault of the scenario becomes a failed poll): the replay JSON lines of the whole run, and the
/metrics bytes and /api/v1/status document at three fixed times. Every bundled recording is
replayed through `specwatch replay`'s path with no config (targets learnt from the file).

    python tests/support/flow_goldens.py --write      # after an intended change of behaviour
    python tests/support/flow_goldens.py --dump DIR   # the outputs themselves, to diff two commits
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import generate_latest

from specwatch import sim
from specwatch.base.jsonsafe import json_safe_record
from specwatch.config import Config, from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay_to
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import load_scenario
from specwatch.sim.sidecar_config import sidecar_config_for
from specwatch.verdict.evaluation import evaluation_record

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "exporter" / "specwatch" / "sim" / "scenarios"
FIXTURES = ROOT / "tests" / "fixtures"
DIGESTS = ROOT / "tests" / "golden" / "flow" / "digests.json"
POLL_SECONDS = 5.0


def scenario_outputs(name: str) -> Iterator[tuple[str, bytes]]:
    scenario = load_scenario(name)
    raw = sidecar_config_for(
        scenario,
        target_url="http://127.0.0.1:1/metrics",
        listen="127.0.0.1:0",
        poll_interval=POLL_SECONDS,
        windows=("1m", "5m"),
    )
    config: Config = from_mapping(raw, environ={})
    pipeline, simulator = Pipeline(config), sim.Simulator(scenario, seed=7)
    polls = int(scenario.duration // POLL_SECONDS)
    snapshots = {polls // 4, polls // 2, polls - 1}
    lines = io.StringIO()
    polled = simulated_polls(simulator, pipeline, interval=POLL_SECONDS, count=polls)
    for i, (t, evaluations) in enumerate(polled, start=1):
        for evaluation in evaluations:
            lines.write(json.dumps(json_safe_record(evaluation_record(evaluation)), sort_keys=True) + "\n")
        if i in snapshots:
            yield f"{name}/metrics@{t:g}", generate_latest(registry_for(pipeline.view))
            status = status_document(pipeline.view())
            yield f"{name}/status@{t:g}", json.dumps(status, sort_keys=True, default=str).encode()
    yield f"{name}/replay", lines.getvalue().encode()


def recording_outputs(path: Path) -> Iterator[tuple[str, bytes]]:
    """A recording (`specwatch record` lines), or a fixture's timeline of captured payloads."""
    lines = path.read_text().splitlines()
    if "timeline" in path.name:  # {"file", "unix_time"} per capture, the payload beside it
        captures = [json.loads(line) for line in lines if line.strip()]
        present = [c for c in captures if (path.parent / c["file"]).exists()]
        lines = [
            json.dumps({"t": c["unix_time"], "target": "vllm", "text": (path.parent / c["file"]).read_text()})
            for c in present
        ]
    out = io.StringIO()
    replay_to(from_mapping({"log": {"level": "warning"}}, environ={}), lines, out, learn_targets=True)
    yield f"recording/{path.relative_to(FIXTURES)}", out.getvalue().encode()


def outputs() -> Iterator[tuple[str, bytes]]:
    for path in sorted(SCENARIOS.glob("*.yaml")):
        yield from scenario_outputs(path.stem)
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        if path.name.endswith(("-recording.jsonl", "timeline.jsonl")):
            yield from recording_outputs(path)


def digests() -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in outputs()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the digests file")
    parser.add_argument("--dump", type=Path, help="write every output under this folder")
    args = parser.parse_args(argv)
    if args.dump:
        for name, data in outputs():
            target = args.dump / name.replace("@", "_at_")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return 0
    found = digests()
    if args.write:
        DIGESTS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        return 0
    kept = json.loads(DIGESTS.read_text())
    changed = sorted(name for name in kept.keys() | found.keys() if kept.get(name) != found.get(name))
    print("\n".join(changed) or "identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
