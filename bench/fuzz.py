"""Bounded fuzz campaign of the exposition parser and the pipeline.

    python bench/fuzz.py --seconds 120            # atheris (libFuzzer) if installed, else Hypothesis
    python bench/fuzz.py --seconds 60 --engine hypothesis

Inputs are bytes turned into payloads by tests/system/reliability/fuzzcheck.py (structure-aware mutations
of the real vLLM fixtures in tests/fixtures/vllm-cpu-real, or raw bytes); the oracle is fuzzcheck.check.
A finding is written to tests/system/reliability/corpus/ (crash-*), where tests/system/reliability/test_fuzz_corpus.py
replays it on every test run. Exit status 0 = no finding within the budget.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
CORPUS = ROOT / "tests" / "system" / "reliability" / "corpus"


def run_atheris(seconds: int, workdir: Path) -> int:
    import atheris

    with atheris.instrument_imports(include=["specwatch"]):
        pass
    from system.reliability.fuzzcheck import check, seed_payloads, text_from_bytes

    payloads = seed_payloads()
    if not payloads:
        print("no seed payloads: tests/fixtures/vllm-cpu-real is empty", file=sys.stderr)
        return 2

    def one(data: bytes) -> None:
        text, good = text_from_bytes(data, payloads)
        check(text, good)

    seeds = workdir / "seeds"
    seeds.mkdir(parents=True, exist_ok=True)
    for i in range(len(payloads)):
        (seeds / f"seed-{i}").write_bytes(bytes([i, 2]) + payloads[i].encode())
    args = [
        sys.argv[0],
        f"-max_total_time={seconds}",
        f"-artifact_prefix={CORPUS}/crash-",
        "-rss_limit_mb=1024",
        "-max_len=262144",
        "-timeout=10",
        "-print_final_stats=1",
        str(workdir / "work"),
        str(seeds),
    ]
    (workdir / "work").mkdir(exist_ok=True)
    atheris.Setup(args, one)
    atheris.Fuzz()  # exits the process: status 0 when the budget ends without a finding
    return 0


def run_hypothesis(seconds: int) -> int:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from system.reliability.fuzzcheck import check, seed_payloads, text_from_bytes

    payloads = seed_payloads()
    deadline = time.monotonic() + seconds
    count = 0
    finding: list[bytes] = []

    # Batches of examples until the budget is spent: Hypothesis has no time budget of its own, and
    # returning early from a test does not stop it from generating more examples.
    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(min_size=2, max_size=4096))
    def campaign(data):
        nonlocal count
        if time.monotonic() > deadline:
            return
        count += 1
        text, good = text_from_bytes(data, payloads)
        try:
            check(text, good)
        except Exception:
            finding.append(data)
            raise

    try:
        while time.monotonic() < deadline:
            campaign()
    except Exception as exc:
        if finding:
            path = CORPUS / f"crash-{hashlib.sha1(finding[-1]).hexdigest()}"
            path.write_bytes(finding[-1])
            print(f"finding after {count} executions: {exc!r}; kept as {path}")
            return 1
        raise
    print(f"hypothesis: {count} executions in {seconds} s, no finding")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="time budget (default 60)")
    parser.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    parser.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp") + "/specwatch-fuzz")
    args = parser.parse_args()
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "hypothesis"
    print(f"fuzz engine: {engine}, budget {args.seconds} s", flush=True)
    if engine == "atheris":
        return run_atheris(args.seconds, Path(args.workdir))
    return run_hypothesis(args.seconds)


if __name__ == "__main__":
    sys.exit(main())
