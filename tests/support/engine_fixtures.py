"""The engine fixture expositions (tests/fixtures/engines/<engine>/*.prom): one file per load
sequence, each poll a whole exposition after a `# poll t=<unix seconds>` line, the file's header
comment citing the engine's source for every family."""

from __future__ import annotations

import json
from pathlib import Path

from support.paths import fixture_path

_POLL = "# poll t="


def fixture(engine: str, name: str) -> Path:
    return fixture_path("engines", engine, name)


def polls(path: Path) -> list[tuple[float, str]]:
    """(time, exposition text) of every poll of a fixture, in file order."""
    out: list[tuple[float, list[str]]] = []
    for line in path.read_text().splitlines():
        if line.startswith(_POLL):
            out.append((float(line[len(_POLL) :]), []))
        elif out:
            out[-1][1].append(line)
    return [(t, "\n".join(lines) + "\n") for t, lines in out]


def recording(path: Path, target: str, upto: int | None = None) -> list[str]:
    """The fixture as a `specwatch replay` recording (its first `upto` polls)."""
    return [json.dumps({"t": t, "target": target, "text": text}) for t, text in polls(path)[:upto]]
