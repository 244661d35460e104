"""Write tests/fixtures/vllm-0.32-cpu/expected.json: reference values for pairs of the captured
payloads, computed independently (promcheck.py: prometheus_client's parser, Prometheus's reset
rule and histogram_quantile), so fast unit tests can check specwatch's parser and derivations
against a real vLLM's output without starting one.

usage: python tests/integration/make_fixture_expectations.py [FIXTURE_DIR]
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import promcheck as pc

PAIRS = [
    ("ngram-00-idle.prom", "ngram-01-c1-quiet.prom"),
    ("ngram-01-c1-quiet.prom", "ngram-02-c4-quiet.prom"),
    ("ngram-02-c4-quiet.prom", "ngram-03-c16-quiet.prom"),
    ("ngram-00-idle.prom", "ngram-03-c16-quiet.prom"),
    # across the real restart: the reset rule makes the increase = before - idle + after
    ("ngram-90-before-restart.prom", "ngram-91-after-restart.prom"),
    ("ngram-03-c16-quiet.prom", "ngram-04-after_restart-quiet.prom"),
    ("nospec-00-idle.prom", "nospec-03-c16-quiet.prom"),
]


def main() -> int:
    d = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu"
    out = []
    for a, b in PAIRS:
        sa = pc.parse(0.0, (d / a).read_text())
        sb = pc.parse(1.0, (d / b).read_text())
        ref = pc.reference([sa, sb])
        ref["position_acceptance_rate"] = {str(k): v for k, v in ref["position_acceptance_rate"].items()}
        out.append(
            {
                "from": a,
                "to": b,
                "spec_families": sb.has_spec,
                "counters_to": sb.counters,
                "per_pos_to": {str(k): v for k, v in sb.per_pos.items()},
                "reference": ref,
            }
        )
    (d / "expected.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {d / 'expected.json'} ({len(out)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
