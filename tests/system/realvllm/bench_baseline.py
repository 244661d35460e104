"""Does specwatch, with nothing configured, predict the measured speedup once it has seen a spec-off baseline?

One sidecar (`specwatch run`, no hardware, model, draft or profile: only the target and a 1 s poll
with a 30s window, so a 40 s phase fills it) watches one port for the whole run.  On that port the
tiny model is served alternately WITHOUT and WITH speculation (a restart on the same port, as a
user measuring first would do), each server driving the same seeded phases at concurrency 1, 4
and 16 (load_driver.py).  A second, fresh sidecar watches only the first spec-on server: the
no-baseline case.

Per spec-on phase, each sidecar's 30s window is read from /api/v1/status while the load still runs
(verdict, expected speedup vs no speculation, batch, alpha, notes).  Measured speedup per
concurrency = mean spec-on tokens/s over the spec-on runs / mean spec-off tokens/s over the spec-off
runs (client side, the same seeded requests).  Nothing here is asserted: it is a bench, its table
goes in docs/real-vllm.md.

The whole /metrics stream is recorded (the `specwatch record` format) to LOGDIR/baseline-recording.jsonl;
`--fixture DIR` writes a copy cut to the families specwatch reads (gzip; every `--fixture-every` s)
and the results beside it (tests/unit/costmodel/test_learned_measured_baseline.py replays it).

usage: python tests/system/realvllm/bench_baseline.py --out DIR [--seconds 40] [--rounds 2]
           [--spec draft|ngram] [--fixture DIR]
       python tests/system/realvllm/bench_baseline.py --out DIR --table-only | --fixture-only --fixture DIR
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_speedup as bench  # noqa: E402 - sibling modules, importable once HERE is on sys.path
import realvllm_harness as harness  # noqa: E402

sys.path.insert(0, str(HERE.parents[1]))
from support.loopback import free_port  # noqa: E402

CONCURRENCIES = (1, 4, 16)
WINDOW = "30s"


def draft_spec(model: Path) -> dict:
    """The tiny model as its own draft: a draft exactly as costly as the target, alpha 1."""
    return {"method": "draft_model", "model": str(model), "num_speculative_tokens": 3}


def sidecar_config(port: int) -> dict:
    """Nothing about the hardware, model, draft or step time: only where to read and how often."""
    return {
        "poll_interval": "1s",
        "windows": [WINDOW, "5m"],
        "targets": [{"name": "vllm", "url": f"http://127.0.0.1:{port}/metrics", "timeout": "900ms"}],
    }


def window_view(status: dict) -> dict | None:
    """The speculating route's 30s window (or the first route's), trimmed to what the table needs."""
    routes = status.get("routes") or []
    route = next((r for r in routes if r.get("spec_present")), routes[0] if routes else None)
    if route is None or WINDOW not in route["windows"]:
        return None
    w = route["windows"][WINDOW]
    keep = (
        "verdict",
        "expected_speedup",
        "speedup_confidence",
        "batch_size",
        "acceptance_rate",
        "draft_length",
        "draft_coverage",
        "breakeven_acceptance_rate",
        "recommended_action",
        "recommended_config",
        "candidate_verdict",
        "notes",
    )
    return {"route": route["route"], "spec_present": route["spec_present"], **{k: w.get(k) for k in keep}}


def drive(srv: harness.VllmServer, c: int, seed: int, seconds: float, logdir: Path, tag: str, sidecars: dict) -> dict:
    """One seeded phase at concurrency c; the sidecars' windows are read every 2 s while it runs, the
    last read (taken with the load still running) is kept."""
    seen: dict = {}

    def read_sidecars(proc: subprocess.Popen[bytes]) -> None:
        t0 = time.time()
        while proc.poll() is None:
            time.sleep(2.0)
            if time.time() - t0 < seconds * 0.75 or proc.poll() is not None:
                continue
            for name, sc in sidecars.items():
                try:
                    view = window_view(sc.status())
                except (
                    OSError,
                    ValueError,
                ) as exc:  # a busy sidecar (requests errors are OSErrors): keep the last read
                    harness.log(f"[{name}] status failed: {exc}")
                    continue
                if view is not None:
                    seen[name] = dict(view, t=time.time())

    client, server = bench.measure_phase(srv, c, seed, seconds, logdir / f"baseline-{tag}-c{c}.json", read_sidecars)
    harness.log(
        f"[{tag}] c={c}: {client['tokens_per_second']:.0f} tok/s, errors {client['errors']}; "
        + "; ".join(f"{n}: {v['verdict']} {v['expected_speedup']}" for n, v in seen.items())
    )
    return {"client": client, "server": server, "sidecars": seen}


def run(py: Path, model: Path, spec: dict, rounds: int, seconds: float, logdir: Path, recording: Path) -> dict:
    port = free_port()
    recording.unlink(missing_ok=True)
    recorder = harness.Recorder(f"http://127.0.0.1:{port}/metrics", "vllm", recording, 1.0).start()
    with_baseline = harness.Sidecar(sidecar_config(port), logdir, "with-baseline")
    with_baseline.start()
    runs: list[dict] = []
    t_start = time.time()
    try:
        for i, arm in enumerate(["nospec", "spec"] * rounds):
            tag = f"{arm}{i // 2 + 1}"
            sidecars = {"with_baseline": with_baseline}
            no_baseline = None
            if arm == "spec" and i == 1:
                # started before the first spec-on server: it never sees a spec-off minute
                no_baseline = harness.Sidecar(sidecar_config(port), logdir, "no-baseline")
                no_baseline.start()
                sidecars["no_baseline"] = no_baseline
            srv = harness.VllmServer(py, model, f"baseline-{tag}", spec if arm == "spec" else None, logdir, port=port)
            srv.start()
            try:
                ready = srv.wait_ready()
                bench.warm_up(srv, logdir / "baseline-warmup.json", 180)
                phases = {
                    c: drive(srv, c, 100 + k, seconds, logdir, tag, sidecars) for k, c in enumerate(CONCURRENCIES)
                }
                runs.append({"arm": arm, "tag": tag, "ready_seconds": ready, "t0": srv._t_start, "phases": phases})
            except BaseException:
                print(srv.log_tail(), file=sys.stderr)
                raise
            finally:
                srv.stop()
                if no_baseline is not None:
                    no_baseline.stop()
    finally:
        recorder.stop()
        with_baseline.stop()
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds_per_phase": seconds,
        "wall_seconds": round(time.time() - t_start, 1),
        "spec": spec,
        "sidecar_config": sidecar_config(0),
        "runs": runs,
        "summary": summarise(runs),
    }


def spec_off_curve(runs: list[dict]) -> list[tuple[float, float]]:
    """The spec-off servers' step time against batch, from their own counters: per concurrency the
    mean batch and mean step over the spec-off runs, batch increasing."""
    points = []
    for key in runs[0]["phases"]:
        servers = [r["phases"][key]["server"] for r in runs if r["arm"] == "nospec"]
        if servers:
            n = len(servers)
            points.append((sum(s["batch"] for s in servers) / n, sum(s["step_seconds"] for s in servers) / n))
    return sorted(points)


def step_at(curve: list[tuple[float, float]], batch: float) -> float:
    """Linear in batch between the curve's points, held at the nearest outside them."""
    if batch <= curve[0][0]:
        return curve[0][1]
    for (b0, t0), (b1, t1) in itertools.pairwise(curve):
        if batch <= b1:
            return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
    return curve[-1][1]


def same_batch_ratio(server: dict, curve: list[tuple[float, float]]) -> float:
    """The spec-on phase's decode speed over the spec-off servers' at the same batch, from the servers'
    counters: tokens per request-step × spec-off step at the spec-on batch / spec-on step. This is
    what specwatch predicts (the same-batch speedup); the client's tokens/s ratio at one concurrency
    also carries the time a request spends outside the decode batch, which differs between the arms
    when the client and the API server share the cores with the engine (the spec-off arm streams
    four times as many chunks)."""
    return server["tokens_per_step_per_request"] * step_at(curve, server["batch"]) / server["step_seconds"]


def summarise(runs: list[dict]) -> dict:
    """Per concurrency: measured ratio (mean spec-on over mean spec-off tokens/s, and per pair), the
    same-batch ratio from the servers' counters (per spec-on run, and its mean), and each sidecar's
    predictions over the spec-on runs."""
    out = {}
    curve = spec_off_curve(runs)
    for c in CONCURRENCIES:
        key = str(c) if str(c) in runs[0]["phases"] else c
        tps = {
            arm: [r["phases"][key]["client"]["tokens_per_second"] for r in runs if r["arm"] == arm]
            for arm in ("spec", "nospec")
        }
        mean = lambda xs: sum(xs) / len(xs)
        measured = mean(tps["spec"]) / mean(tps["nospec"])
        spec_runs = [r["phases"][key] for r in runs if r["arm"] == "spec"]
        row = {
            "spec_tokens_per_second": tps["spec"],
            "nospec_tokens_per_second": tps["nospec"],
            "measured_ratio": measured,
            "pair_ratios": [s / n for s, n in zip(tps["spec"], tps["nospec"], strict=False)],
            "same_batch_ratios": [same_batch_ratio(p["server"], curve) for p in spec_runs],
        }
        row["same_batch_ratio"] = mean(row["same_batch_ratios"])
        for name in ("with_baseline", "no_baseline"):
            views = [p["sidecars"].get(name) for p in spec_runs]
            row[name] = [
                None
                if v is None
                else {
                    "verdict": v["verdict"],
                    "expected_speedup": v["expected_speedup"],
                    "error": None if v["expected_speedup"] is None else v["expected_speedup"] / measured - 1,
                    "same_batch_error": None
                    if v["expected_speedup"] is None
                    else v["expected_speedup"] / row["same_batch_ratio"] - 1,
                    "batch_size": v["batch_size"],
                    "acceptance_rate": v["acceptance_rate"],
                    "notes": v["notes"],
                }
                for v in views
                if v is not None or name == "with_baseline"
            ]
        out[c] = row
    return out


def table(results: dict) -> str:
    fx = lambda x: "n/a" if x is None else f"{x:.2f}×"
    pc = lambda x: "" if x is None else f" ({100 * x:+.0f} %)"
    both = lambda v: "" if v["error"] is None else f" ({100 * v['error']:+.0f} %; {100 * v['same_batch_error']:+.0f} %)"
    rows = [
        "| concurrency | spec-on tok/s (runs) | spec-off tok/s (runs) | **measured ratio** (per pair) "
        "| **same-batch ratio**, servers' counters (runs) "
        "| **predicted, with baseline** (error vs measured; vs same-batch) | verdict "
        "| **predicted, no baseline** (error) / verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, r in results["summary"].items():
        wb = [v for v in r["with_baseline"] if v is not None]
        nb = [v for v in r["no_baseline"] if v is not None]
        rows.append(
            f"| {c} | {', '.join(f'{x:.0f}' for x in r['spec_tokens_per_second'])} "
            f"| {', '.join(f'{x:.0f}' for x in r['nospec_tokens_per_second'])} "
            f"| **{r['measured_ratio']:.2f}×** ({', '.join(f'{x:.2f}' for x in r['pair_ratios'])}) "
            f"| **{r['same_batch_ratio']:.2f}×** ({', '.join(f'{x:.2f}' for x in r['same_batch_ratios'])}) "
            f"| **{', '.join(fx(v['expected_speedup']) + both(v) for v in wb) or 'n/a'}** "
            f"| {', '.join(str(v['verdict']) for v in wb)} "
            f"| **{', '.join(fx(v['expected_speedup']) + pc(v['error']) for v in nb) or 'n/a'}** / "
            f"{', '.join(str(v['verdict']) for v in nb)} |"
        )
    return "\n".join(rows)


def read_families() -> frozenset[str]:
    """The vLLM families specwatch's vLLM schema reads (a fixture keeps only these)."""
    from specwatch.engines.vllm import VLLM

    return frozenset({f for src in VLLM.counters for f in src.families} | {VLLM.running, *VLLM.lifetime_gauges})


def family_of(line: str) -> str:
    if line.startswith("#"):
        parts = line.split()
        return parts[2] if len(parts) > 2 else ""
    name = line.split("{", 1)[0].split(" ", 1)[0]
    for suffix in ("_bucket", "_sum", "_count", "_created", "_total"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def keep_read_families(text: str, families: frozenset[str]) -> str:
    return "".join(line + "\n" for line in text.splitlines() if family_of(line) in families or line.startswith("# EOF"))


def thin(recording: Path, out: Path, every: float) -> int:
    """Keep one recorded payload per `every` seconds (the sidecar reads them as a slower poll), and of
    each only the families specwatch reads; gzip (mtime 0, so the same run gives the same bytes)."""
    families = read_families()
    kept, last, lines = 0, None, []
    for line in recording.read_text().splitlines():
        entry = json.loads(line)
        if last is None or entry["t"] - last >= every - 0.05:
            entry["text"] = keep_read_families(entry["text"], families)
            lines.append(json.dumps(entry) + "\n")
            kept, last = kept + 1, entry["t"]
    out.write_bytes(gzip.compress("".join(lines).encode(), mtime=0))
    return kept


def write_fixture(results: dict, fixture: Path, every: float) -> None:
    fixture.mkdir(parents=True, exist_ok=True)
    spec = "draft" if results["spec"].get("method") == "draft_model" else "ngram"
    n = thin(Path(results["recording"]), fixture / f"baseline-{spec}-recording.jsonl.gz", every)
    (fixture / f"baseline-{spec}-results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    harness.log(f"fixture: {n} payloads in {fixture}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--spec", choices=("draft", "ngram"), default="draft")
    ap.add_argument("--fixture", help="also write a thinned recording and the results into this directory")
    ap.add_argument("--fixture-every", type=float, default=1.0)
    ap.add_argument("--table-only", action="store_true", help="print the table of OUT/baseline-SPEC-results.json")
    ap.add_argument("--fixture-only", action="store_true", help="write --fixture from a saved run and its recording")
    a = ap.parse_args()
    out = Path(a.out)
    if a.fixture_only and not a.fixture:
        ap.error("--fixture-only needs --fixture DIR")
    if a.table_only or a.fixture_only:
        saved = json.loads((out / f"baseline-{a.spec}-results.json").read_text())
        saved["summary"] = summarise(saved["runs"])  # a pure function of the runs: older files gain new columns
        if a.fixture_only:
            write_fixture(saved, Path(a.fixture), a.fixture_every)
        print(table(saved))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    logdir = harness.cache_dir() / "bench-logs"
    logdir.mkdir(parents=True, exist_ok=True)
    py = harness.ensure_vllm_venv()
    model = harness.ensure_tiny_model(py)
    spec = draft_spec(model) if a.spec == "draft" else harness.NGRAM_SPEC
    recording = logdir / f"baseline-{a.spec}-recording.jsonl"
    results = run(py, model, spec, a.rounds, a.seconds, logdir, recording)
    results["recording"] = str(recording)
    (out / f"baseline-{a.spec}-results.json").write_text(json.dumps(results, indent=1, default=str))
    if a.fixture:
        write_fixture(results, Path(a.fixture), a.fixture_every)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
