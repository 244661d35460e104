"""The end-to-end outputs stay byte-identical unless a commit means to change them: replay of
every bundled scenario and recording, /metrics and /api/v1/status at fixed times
(tests/support/flow_goldens.py; rewrite the digests with its --write after an intended change)."""

from __future__ import annotations

import json

from support import flow_goldens


def test_replay_metrics_and_status_outputs_match_their_kept_digests():
    kept = json.loads(flow_goldens.DIGESTS.read_text())
    found = flow_goldens.digests()
    changed = sorted(name for name in kept.keys() | found.keys() if kept.get(name) != found.get(name))
    assert changed == [], f"outputs changed: {changed} (python tests/support/flow_goldens.py --dump DIR to see them)"
