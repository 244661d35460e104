"""The lesson's calculators: ``breakeven``, ``simulate``, ``plan``, ``memory`` (DESIGN.md §8, LESSON.md).

Every number comes from specwatch.costmodel, built through the same ``cost_model_from_config``
path as the live sidecar, so ``specwatch breakeven`` and the sidecar agree for the same inputs.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from types import SimpleNamespace
from typing import Any, Sequence

from . import costmodel as cmod

# ---------------------------------------------------------------------------------------------
# Shared argument handling
# ---------------------------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one number")
    return vals


def _ints(text: str) -> list[int]:
    vals = _floats(text)
    if any(v != int(v) or v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return [int(v) for v in vals]


def _traffic(text: str) -> list[tuple[str, float, float]]:
    """``chat=0.7:0.7,code=0.3:0.4`` -> [(name, share, alpha)]; shares are normalised."""
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            name, rest = part.split("=", 1)
            share, alpha = (float(x) for x in rest.split(":", 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"traffic entry {part!r}: expected name=share:alpha") from None
        if share <= 0 or not (0 <= alpha <= 1):
            raise argparse.ArgumentTypeError(f"traffic entry {part!r}: share must be > 0, alpha in [0, 1]")
        out.append((name.strip(), share, alpha))
    if not out:
        raise argparse.ArgumentTypeError("traffic: at least one name=share:alpha")
    total = sum(s for _, s, _ in out)
    return [(n, s / total, a) for n, s, a in out]


def _add_hardware_args(p: argparse.ArgumentParser, default_hw: str = "h100-sxm") -> None:
    g = p.add_argument_group("hardware (default: %s)" % default_hw)
    g.add_argument("--hardware", choices=sorted(cmod.HARDWARE_PRESETS), default=None,
                   help="GPU preset")
    g.add_argument("--bandwidth", type=float, default=None, help="HBM bytes/s (instead of --hardware)")
    g.add_argument("--flops", type=float, default=None, help="peak bf16 FLOP/s (instead of --hardware)")


def _add_common_model_args(p: argparse.ArgumentParser, default_context: int = 2048) -> None:
    p.add_argument("--dtype", choices=["bf16", "fp8", "int8", "int4"], default=None, help="weight dtype (bf16)")
    p.add_argument("--tp", type=int, default=None, help="tensor parallel size (1)")
    p.add_argument("--context", type=int, default=default_context,
                   help=f"context tokens per request ({default_context})")


def _load_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SystemExit(f"error: --model-config {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"error: --model-config {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: --model-config {path}: expected a JSON object")
    return data


def build_cost_model(args: argparse.Namespace, *, default_hw: str = "h100-sxm", default_model: str | None = None,
                     default_dtype: str = "bf16", default_tp: int | None = None) -> cmod.CostModel:
    """CostModel from CLI flags through the sidecar's cost_model_from_config."""
    hw = getattr(args, "hardware", None)
    bw, fl = getattr(args, "bandwidth", None), getattr(args, "flops", None)
    if hw is None and not (bw or fl):
        hw = default_hw
    if hw is None and not (bw and fl):
        raise SystemExit("error: give --hardware, or both --bandwidth and --flops")
    hf = _load_json(args.model_config) if getattr(args, "model_config", None) else None
    preset = getattr(args, "model", None)
    params = getattr(args, "params", None)
    if hf is None and preset is None and params is None:
        preset = default_model
    cfg = SimpleNamespace(
        hardware=SimpleNamespace(preset=hw, bandwidth_bytes_per_second=bw, flops=fl, mbu=None, mfu=None,
                                 overhead_seconds=None),
        tensor_parallel=getattr(args, "tp", None) or default_tp or 1,
        model=SimpleNamespace(preset=preset if hf is None else None, config_json=getattr(args, "model_config", None),
                              hf_config=hf, params=params, dtype=getattr(args, "dtype", None) or default_dtype,
                              layers=None, kv_heads=None, head_dim=None, context_tokens=args.context),
        draft=SimpleNamespace(method=getattr(args, "method", None) or "auto",
                              cost_per_token=getattr(args, "draft_cost", None),
                              k=max(getattr(args, "k_list", None) or [3])),
        profile=None,
    )
    try:
        return cmod.cost_model_from_config(cfg)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _r(x: float | None, nd: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), nd)


def _emit(obj: Any, out) -> None:
    out.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _describe(cm: cmod.CostModel) -> dict[str, Any]:
    return {
        "hardware": cm.hardware.name,
        "model": cm.model.name,
        "dtype": cm.dtype,
        "tensor_parallel": cm.tensor_parallel,
        "context_tokens_per_request": int(cm.context_tokens),
        "draft_method": cm.draft.method,
        "draft_cost_per_token": _r(cm.draft_cost_per_token()),
        "mbu": cm.mbu, "mfu": cm.mfu, "overhead_seconds": cm.overhead_seconds,
    }


# ---------------------------------------------------------------------------------------------
# breakeven
# ---------------------------------------------------------------------------------------------


def breakeven_rows(cm: cmod.CostModel, batches: Sequence[int], ks: Sequence[int], alpha: float | None) -> list[dict]:
    rows = []
    for b in batches:
        for k in ks:
            rows.append({
                "batch": int(b),
                "k": int(k),
                "breakeven_acceptance_rate": _r(cmod.breakeven_acceptance_rate(cm, b, k)),
                "expected_speedup": None if alpha is None else _r(cmod.expected_speedup(cm, b, k, alpha)),
            })
    return rows


def cmd_breakeven(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    args.k_list = args.k
    cm = build_cost_model(args, default_model="llama-3.1-8b")
    rows = breakeven_rows(cm, args.batch, args.k, args.alpha)
    if args.format == "json":
        _emit(rows, out)
        return 0
    d = _describe(cm)
    out.write(f"# {d['model']} {d['dtype']} TP{d['tensor_parallel']} on {d['hardware']}, "
              f"{d['context_tokens_per_request']} context tokens/request, draft {d['draft_method']} "
              f"(c = {d['draft_cost_per_token']} of a step per drafted token)\n")
    head = f"{'batch':>6} {'K':>3} {'break-even alpha':>17}"
    if args.alpha is not None:
        head += f" {'speedup @ alpha=' + format(args.alpha, 'g'):>20}"
    out.write(head + "\n")
    for r in rows:
        line = f"{r['batch']:>6} {r['k']:>3} {r['breakeven_acceptance_rate']:>17.3f}"
        if args.alpha is not None:
            line += f" {r['expected_speedup']:>19.2f}x"
        out.write(line + "\n")
    out.write("break-even >= 1 means speculation cannot pay at that batch size.\n")
    return 0


# ---------------------------------------------------------------------------------------------
# simulate: the lesson's toy decode loop
# ---------------------------------------------------------------------------------------------


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank quantile of raw samples (the simulator has raw samples, not buckets)."""
    if not sorted_vals:
        return math.nan
    idx = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


def simulate_cell(rng: random.Random, t_base: float, t_spec: float, k: int, alpha: float, tokens: int,
                  requests: int, jitter: float) -> dict[str, float]:
    """Decode ``requests`` streams of ``tokens`` tokens with and without speculation.

    Without: one token per step of t_base. With: each step drafts K tokens, accepts a prefix whose
    per-token acceptance a is i.i.d. and chosen so that vLLM's alpha (accepted/drafted) equals
    ``alpha``, emits prefix + 1 bonus token, and costs t_spec. Step times get lognormal jitter.
    ITL is recorded per step (as vLLM's histogram does); per-token mean = time / tokens.
    """
    a = cmod.per_token_rate_from_alpha(alpha, k)
    log_a = math.log(a) if 0 < a < 1 else None
    plain_steps: list[float] = []
    spec_steps: list[float] = []
    plain_time = spec_time = 0.0
    drafted = accepted_total = 0
    for _ in range(requests):
        for _ in range(tokens):
            dt = t_base * rng.lognormvariate(0.0, jitter)
            plain_steps.append(dt)
            plain_time += dt
        left = tokens
        while left > 0:
            if a >= 1:
                acc = k
            elif log_a is None:
                acc = 0
            else:
                # number of leading successes of i.i.d. Bernoulli(a), capped at K
                acc = min(k, int(math.log(1.0 - rng.random()) / log_a))
            drafted += k
            accepted_total += acc
            dt = t_spec * rng.lognormvariate(0.0, jitter)
            spec_steps.append(dt)
            spec_time += dt
            left -= acc + 1
    n = tokens * requests
    plain_steps.sort()
    spec_steps.sort()
    return {
        "measured_alpha": accepted_total / drafted if drafted else 0.0,
        "measured_speedup": plain_time / spec_time,
        "itl_mean_per_token_off": plain_time / n,
        "itl_mean_per_token_on": spec_time / n,
        "itl_p50_off": _quantile(plain_steps, 0.5),
        "itl_p99_off": _quantile(plain_steps, 0.99),
        "itl_p50_on": _quantile(spec_steps, 0.5),
        "itl_p99_on": _quantile(spec_steps, 0.99),
    }


def alpha_for_speedup(cm: cmod.CostModel, batch: int, k: int, target: float) -> float | None:
    """alpha with expected_speedup == target: (target·T_spec/T_base − 1)/K; None if > 1."""
    a = (target * cm.spec_step_time(batch, k) / cm.base_step_time(batch) - 1.0) / k
    return a if a <= 1.0 else None


def simulate_report(args: argparse.Namespace) -> dict[str, Any]:
    args.k_list = args.k
    if args.draft_cost is None and args.method is None:
        # The lesson's epsilon: total draft+verify overhead at batch 1 for K=5.
        args.draft_cost = args.overhead / 5.0
    cm = build_cost_model(args, default_model="llama-3.3-70b", default_dtype="fp8", default_tp=4)
    rng = random.Random(args.seed)
    grid = []
    for b in args.batch:
        t_base = cm.base_step_time(b)
        for k in args.k:
            t_spec = cm.spec_step_time(b, k)
            be = cmod.breakeven_acceptance_rate(cm, b, k)
            for alpha in args.alphas:
                sim = simulate_cell(rng, t_base, t_spec, k, alpha, args.tokens, args.requests, args.jitter)
                grid.append({
                    "batch": b, "k": k, "alpha": alpha,
                    "breakeven_acceptance_rate": _r(be),
                    "expected_speedup": _r(cmod.expected_speedup(cm, b, k, alpha)),
                    **{key: _r(v, 6 if key.startswith("itl") else 4) for key, v in sim.items()},
                })

    answers: dict[str, Any] = {}
    answers["alpha_for_speedup_at_k5"] = [
        {"batch": b, "alpha_for_2x": _r(alpha_for_speedup(cm, b, 5, 2.0)),
         "alpha_for_3x": _r(alpha_for_speedup(cm, b, 5, 3.0))} for b in args.batch]
    # Lesson form: S = (1 + K·alpha)/(1 + eps) -> alpha = (S(1 + eps) − 1)/K at K=5.
    answers["overhead_sensitivity_k5"] = [
        {"overhead": eps, "breakeven": _r(eps / 5), "alpha_for_2x": _r((2 * (1 + eps) - 1) / 5),
         "alpha_for_3x": _r((3 * (1 + eps) - 1) / 5) if (3 * (1 + eps) - 1) / 5 <= 1 else None}
        for eps in (0.05, 0.10, 0.15, 0.25, 0.50)]
    traffic = args.traffic
    blended = sum(s * a for _, s, a in traffic)
    k_ref = 5 if 5 in args.k else max(args.k)
    answers["blended_traffic"] = {
        "routes": [{"route": n, "share": _r(s), "alpha": a} for n, s, a in traffic],
        "blended_alpha": _r(blended),
        "k": k_ref,
        "per_batch": [
            {"batch": b, "breakeven": _r(cmod.breakeven_acceptance_rate(cm, b, k_ref)),
             "blended_speedup": _r(cmod.expected_speedup(cm, b, k_ref, blended)),
             "net_positive": cmod.expected_speedup(cm, b, k_ref, blended) > 1.0,
             "routes_below_breakeven": [n for n, _, a in traffic
                                        if a < cmod.breakeven_acceptance_rate(cm, b, k_ref)]}
            for b in args.batch],
    }
    # Mean ITL fell by m while P99 (per step) rose by p: P99 tracks the spec step (1 + eps) and
    # the per-token mean tracks (1 + eps)/tau, so eps = p and tau = (1 + p)/(1 − m).
    m, p = -args.itl_mean_change, args.itl_p99_change
    tau = (1 + p) / (1 - m)
    diag_alpha = (tau - 1) / 5
    rates = cmod.position_rates_from_alpha(min(max(diag_alpha, 0.0), 1.0), 5)
    answers["itl_diagnosis"] = {
        "mean_itl_change": -m, "p99_itl_change": p, "k": 5,
        "implied_overhead": _r(p), "implied_tau": _r(tau), "implied_alpha": _r(diag_alpha),
        "recommended_k_at_batch_1": cmod.best_draft_length(cm, 1, rates),
        "explanation": (
            "vLLM's ITL histogram records one latency per engine step. With speculation a step "
            "carries 1 + K*alpha tokens on average, so the per-token mean falls, but every step costs "
            "T_spec = T_base*(1+overhead), and a step whose drafts are all rejected delivers one token "
            "after that longer wait: the P99 rises by about the overhead. At full batch the overhead "
            "grows (verification leaves the memory-bound regime), widening the gap."),
        "mitigation": ("shorten K (or a batch-size schedule) so that the overhead per step falls, train or pick "
                       "a drafter with higher alpha on this traffic, and gate P99 ITL against the spec-off baseline"),
    }
    return {"model": _describe(cm), "seed": args.seed, "tokens_per_request": args.tokens,
            "requests": args.requests, "jitter": args.jitter, "grid": grid, "answers": answers}


def cmd_simulate(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    rep = simulate_report(args)
    if args.format == "json":
        _emit(rep, out)
        return 0
    d = rep["model"]
    out.write(f"# toy decode loop: {d['model']} {d['dtype']} TP{d['tensor_parallel']} on {d['hardware']}, "
              f"{d['context_tokens_per_request']} ctx, draft cost {d['draft_cost_per_token']} of a step per token, "
              f"seed {rep['seed']}, {rep['requests']}x{rep['tokens_per_request']} tokens\n")
    out.write(f"{'B':>4} {'K':>2} {'alpha':>5} {'a*':>6} {'S(model)':>8} {'S(sim)':>7} "
              f"{'ITL/tok off':>11} {'on':>8} {'P50 off':>8} {'on':>8} {'P99 off':>8} {'on':>8}  (ms)\n")
    for g in rep["grid"]:
        out.write(f"{g['batch']:>4} {g['k']:>2} {g['alpha']:>5.2f} {g['breakeven_acceptance_rate']:>6.3f} "
                  f"{g['expected_speedup']:>7.2f}x {g['measured_speedup']:>6.2f}x "
                  f"{g['itl_mean_per_token_off'] * 1e3:>11.2f} {g['itl_mean_per_token_on'] * 1e3:>8.2f} "
                  f"{g['itl_p50_off'] * 1e3:>8.2f} {g['itl_p50_on'] * 1e3:>8.2f} "
                  f"{g['itl_p99_off'] * 1e3:>8.2f} {g['itl_p99_on'] * 1e3:>8.2f}\n")
    a = rep["answers"]
    out.write("\n## alpha needed at K=5 (this model)\n")
    for r in a["alpha_for_speedup_at_k5"]:
        out.write(f"  batch {r['batch']}: 2x needs alpha {r['alpha_for_2x']}, 3x needs alpha {r['alpha_for_3x']}"
                  " (None = unreachable)\n")
    out.write("\n## sensitivity to verify overhead (lesson form, K=5)\n")
    for r in a["overhead_sensitivity_k5"]:
        out.write(f"  overhead {r['overhead']:.2f}: break-even {r['breakeven']}, 2x at {r['alpha_for_2x']}, "
                  f"3x at {r['alpha_for_3x']}\n")
    bt = a["blended_traffic"]
    mix = ", ".join("%s %.0f%% @ %s" % (r["route"], r["share"] * 100, r["alpha"]) for r in bt["routes"])
    out.write(f"\n## blended traffic: alpha = {bt['blended_alpha']} ({mix}), K={bt['k']}\n")
    for r in bt["per_batch"]:
        below = ", ".join(r["routes_below_breakeven"]) or "none"
        out.write(f"  batch {r['batch']}: break-even {r['breakeven']}, blended speedup {r['blended_speedup']}x, "
                  f"net {'positive' if r['net_positive'] else 'NEGATIVE'}; routes below break-even: {below}\n")
    dg = a["itl_diagnosis"]
    out.write(f"\n## mean ITL {dg['mean_itl_change']:+.0%} but P99 ITL {dg['p99_itl_change']:+.0%}\n"
              f"  implies overhead {dg['implied_overhead']}, tau {dg['implied_tau']}, alpha {dg['implied_alpha']} "
              f"at K=5; best K at batch 1: {dg['recommended_k_at_batch_1']}\n  {dg['explanation']}\n"
              f"  Mitigate: {dg['mitigation']}.\n")
    return 0


# ---------------------------------------------------------------------------------------------
# memory: EAGLE-3 head vs a classic draft model
# ---------------------------------------------------------------------------------------------


def memory_report(args: argparse.Namespace) -> dict[str, Any]:
    args.k_list = None
    cm = build_cost_model(args, default_model="llama-3.3-70b", default_dtype="fp8", default_tp=4)
    target = cm.model
    if args.draft_model_config:
        draft = cmod.model_spec_from_hf_config(_load_json(args.draft_model_config), name=args.draft_model_config)
    else:
        draft = cmod.MODEL_PRESETS[args.draft_model]
    tokens = args.concurrency * args.context
    kv_scale = 1.0  # KV cache in bf16
    head_params = cmod.draft_head_params(target, "eagle3", draft_vocab=args.draft_vocab)
    items = {
        "target": {"params": target.total_params,
                   "weights_bytes": cmod.model_total_weight_bytes(target, cm.dtype),
                   "kv_bytes_per_token": target.kv_bytes_per_token_bf16 * kv_scale},
        "eagle3_head": {"params": head_params, "weights_bytes": head_params * 2.0,
                        "kv_bytes_per_token": cmod.draft_head_kv_bytes_per_token(target) * kv_scale},
        "draft_model": {"name": draft.name, "params": draft.total_params,
                        "weights_bytes": cmod.model_total_weight_bytes(draft, args.draft_dtype),
                        "kv_bytes_per_token": draft.kv_bytes_per_token_bf16 * kv_scale},
    }
    for v in items.values():
        v["kv_bytes_at_load"] = v["kv_bytes_per_token"] * tokens
        v["total_bytes_at_load"] = v["weights_bytes"] + v["kv_bytes_at_load"]
    gpu = cm.hardware.memory_bytes
    budget = None if gpu is None else gpu * cm.tensor_parallel * args.gpu_memory_utilization
    capacity = {}
    for name in ("eagle3_head", "draft_model"):
        extra = items[name]
        if budget is not None:
            free_plain = budget - items["target"]["weights_bytes"]
            free_spec = free_plain - extra["weights_bytes"]
            plain_tokens = free_plain / items["target"]["kv_bytes_per_token"]
            spec_tokens = free_spec / (items["target"]["kv_bytes_per_token"] + extra["kv_bytes_per_token"])
            capacity[name] = {"kv_tokens_without": int(max(plain_tokens, 0)), "kv_tokens_with": int(max(spec_tokens, 0)),
                              "kv_capacity_lost": _r(1 - spec_tokens / plain_tokens) if plain_tokens > 0 else None}
    gb = 1e9
    components = {}
    for key, v in items.items():
        c = {"params_billion": _r(v["params"] / 1e9, 3), "weights_gb": _r(v["weights_bytes"] / gb, 3),
             "kv_bytes_per_token": int(round(v["kv_bytes_per_token"])),
             "kv_gb_at_load": _r(v["kv_bytes_at_load"] / gb, 3),
             "total_gb_at_load": _r(v["total_bytes_at_load"] / gb, 3)}
        if "name" in v:
            c["name"] = v["name"]
        components[key] = c
    return {
        "target": {"model": target.name, "dtype": cm.dtype, "tensor_parallel": cm.tensor_parallel,
                   "hardware": cm.hardware.name, "concurrency": args.concurrency, "context_tokens": args.context},
        "components": components,
        "kv_capacity": capacity,
        "eagle3_vs_draft_model_memory_ratio": _r(items["eagle3_head"]["total_bytes_at_load"]
                                                 / items["draft_model"]["total_bytes_at_load"]),
    }


def cmd_memory(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    rep = memory_report(args)
    if args.format == "json":
        _emit(rep, out)
        return 0
    t = rep["target"]
    out.write(f"# memory of a drafter for {t['model']} ({t['dtype']}, TP{t['tensor_parallel']}, {t['hardware']}) "
              f"at {t['concurrency']} requests x {t['context_tokens']} context tokens\n")
    out.write(f"{'component':<14} {'params (B)':>10} {'weights GB':>11} {'KV B/token':>11} {'KV GB at load':>14} "
              f"{'total GB':>9}\n")
    for name, c in rep["components"].items():
        out.write(f"{name:<14} {c['params_billion']:>10.3f} {c['weights_gb']:>11.2f} {c['kv_bytes_per_token']:>11} "
                  f"{c['kv_gb_at_load']:>14.2f} {c['total_gb_at_load']:>9.2f}\n")
    for name, c in rep["kv_capacity"].items():
        if c["kv_tokens_without"] <= 0:
            out.write(f"{name}: the target's weights alone do not fit; raise --tp\n")
            continue
        out.write(f"{name}: KV cache capacity {c['kv_tokens_without']} -> {c['kv_tokens_with']} tokens "
                  f"({c['kv_capacity_lost']:.1%} lost)\n")
    out.write(f"EAGLE-3 head needs {rep['eagle3_vs_draft_model_memory_ratio']:.0%} of the draft model's memory "
              f"at this load.\n")
    return 0


# ---------------------------------------------------------------------------------------------
# plan: staged rollout in markdown
# ---------------------------------------------------------------------------------------------


def plan_markdown(args: argparse.Namespace) -> str:
    args.k_list = [args.k]
    cm = build_cost_model(args, default_model="llama-3.3-70b", default_dtype="fp8", default_tp=4)
    b, k = args.concurrency, args.k
    traffic = args.traffic
    blended = sum(s * a for _, s, a in traffic)
    t_base = cm.base_step_time(b)
    t_spec = cm.spec_step_time(b, k)
    be = cmod.breakeven_acceptance_rate(cm, b, k)
    gate = be + args.margin
    prefill = cm.step_time(args.prompt_tokens, 0.0)  # one prompt alone, no queueing
    rates = cmod.position_rates_from_alpha(blended, k)
    sched = cmod.recommend_schedule(cm, rates, max(args.max_batch, b))
    best = cmod.best_draft_length(cm, b, rates)
    config = cmod.speculative_config(args.method, k, sched) if any(x > 0 for *_, x in sched) else None
    weights = cmod.model_total_weight_bytes(cm.model, cm.dtype)
    kv_load = cm.kv_bytes_per_token * b * cm.context_tokens
    mem = cm.hardware.memory_bytes
    d = _describe(cm)
    lines = [
        f"# Speculative decoding rollout plan: {d['model']} on {d['tensor_parallel']}x {d['hardware']}",
        "",
        f"Inputs: {d['dtype']} weights, TP {d['tensor_parallel']}, drafter `{args.method}` with K={k}, "
        f"target concurrency {b}, {d['context_tokens_per_request']} context tokens per request, "
        f"traffic {', '.join(f'{n} {s:.0%} at alpha {a}' for n, s, a in traffic)} (blended alpha {blended:.3f}).",
        f"Model: specwatch cost model (MBU {cm.mbu}, MFU {cm.mfu}, c0 {cm.overhead_seconds * 1e3:.1f} ms, "
        f"draft cost {d['draft_cost_per_token']} of a step per drafted token). Estimates, to be replaced by "
        f"the measurements each stage asks for.",
        "",
    ]
    if mem is not None:
        need = (weights + kv_load) / (mem * cm.tensor_parallel)
        lines += [f"Memory check: weights {weights / 1e9:.1f} GB + KV {kv_load / 1e9:.1f} GB at load = "
                  f"{need:.0%} of {cm.tensor_parallel}x{mem / 1e9:.0f} GB"
                  + (" -- does NOT fit: raise TP, use fp8 KV or lower concurrency/context." if need > 0.9 else "."), ""]
    lines += [
        "## Stage 1 - baseline (speculation off)",
        f"- Serve the target plain; run `vllm bench serve` at concurrency {b}.",
        f"- Expected: decode step {t_base * 1e3:.1f} ms, so ITL about {t_base * 1e3:.1f} ms per token, "
        f"throughput about {b / t_base:,.0f} output tokens/s; TTFT for a {args.prompt_tokens}-token prompt "
        f"without queueing about {prefill * 1e3:.0f} ms.",
        "- Record TTFT, mean and P99 ITL, and output tokens/s. Put the P99 ITL in specwatch's "
        "`routes[].baseline_itl_p99_seconds`.",
        "",
        "## Stage 2 - enable speculation",
        "- Add to `--speculative-config` (keep your drafter's `model` path):",
        "",
        "```json",
        json.dumps(config, separators=(", ", ": ")) if config else "// the model says speculation does not pay",
        "```",
        "",
        "- The `num_speculative_tokens_per_batch_size` schedule steps K down as concurrency rises "
        "(vLLM V1; `disable_by_batch_size` is ignored by V1 and is not used). It is disabled automatically with "
        "data parallel > 1: then use a fixed `num_speculative_tokens`.",
        f"- Expected at concurrency {b}: spec step {t_spec * 1e3:.1f} ms vs {t_base * 1e3:.1f} ms plain "
        f"(verify overhead {t_spec / t_base - 1:.0%}); best K at this concurrency {best}.",
        "",
        "## Stage 3 - measure alpha per route",
        "- Run specwatch beside vLLM with one route per traffic class; read "
        "`specwatch_acceptance_rate{route=...,window=\"5m\"}` after at least "
        f"{args.min_drafts} drafts per window.",
        "",
        "| route | share | alpha (assumed) | break-even at this concurrency | expected speedup | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for n, s, a in traffic + [("blended", 1.0, blended)]:
        sp = cmod.expected_speedup(cm, b, k, a)
        verdict = "keep" if a >= gate else ("disable" if a < be - args.margin else "marginal")
        lines.append(f"| {n} | {s:.0%} | {a:.3f} | {be:.3f} | {sp:.2f}x | {verdict} |")
    fits = cmod.max_concurrency_by_memory(cm)
    b_max = cmod.max_speculative_batch_size(cm, k, blended, limit=max(fits or cmod.MAX_BATCH_LIMIT, 1))
    lines += [
        "",
        "## Stage 4 - gate at break-even",
        f"- Keep speculation only if alpha >= {gate:.3f} (break-even {be:.3f} + margin {args.margin}) on the "
        "production mix; at the blended alpha it pays up to "
        + (f"{b_max} concurrent requests" if b_max else "no concurrency at all")
        + (f" (memory holds at most {fits} requests of {int(cm.context_tokens)} tokens)." if fits is not None else "."),
        "- A route below break-even: serve it from a replica without speculation (gateway routing) or train a "
        "domain drafter for it.",
        "",
        "## Stage 5 - watch P99 ITL",
        f"- vLLM's ITL is per step: expect P99 ITL to rise by about {t_spec / t_base - 1:.0%} (a fully rejected "
        f"draft waits one spec step for one token) while the per-token mean falls by about "
        f"{1 - t_spec / t_base / (1 + k * blended):.0%}.",
        f"- Alert when P99 ITL exceeds the baseline by more than {t_spec / t_base - 1 + 0.1:.0%} "
        "(specwatch `SpecDecodeITLP99Regression`).",
        "",
        "## Rollback trigger",
        f"- `SpecDecodeBelowBreakeven` firing (specwatch verdict `disable` held for {args.hold} evaluations), or the "
        "P99 ITL regression above, or output tokens/s below the Stage 1 baseline at the same concurrency.",
        "- Action: remove `--speculative-config` (or apply the schedule above with K=0 for the affected band) and "
        "restart; vLLM V1 cannot disable speculation at runtime.",
        "",
    ]
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    out.write(plan_markdown(args))
    return 0


# ---------------------------------------------------------------------------------------------
# argparse wiring
# ---------------------------------------------------------------------------------------------


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("breakeven", help="break-even acceptance rate vs batch size",
                              description="Break-even vLLM acceptance rate alpha*(B, K) and the speedup at --alpha.")
    _add_hardware_args(p)
    mg = p.add_mutually_exclusive_group()
    mg.add_argument("--model-config", help="HF config.json of the target")
    mg.add_argument("--params", type=float, help="target parameter count (dense)")
    p.add_argument("--dtype", choices=["bf16", "fp8", "int8", "int4"], default=None, help="weight dtype (bf16)")
    p.add_argument("--tp", type=int, default=None, help="tensor parallel size (1)")
    p.add_argument("--method", choices=[m for m in cmod.DRAFT_METHODS], default=None, help="drafter (auto = eagle3)")
    p.add_argument("--draft-cost", type=float, default=None,
                   help="draft cost per drafted token, fraction of a plain target step")
    p.add_argument("--k", type=_ints, required=True, help="draft length K (or a comma list)")
    p.add_argument("--batch", type=_ints, required=True, help="comma list of batch sizes, e.g. 1,8,64,256")
    p.add_argument("--context", type=int, default=2048, help="context tokens per request (2048)")
    p.add_argument("--alpha", type=float, default=None, help="acceptance rate for the speedup column")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_breakeven)

    s = subparsers.add_parser("simulate", help="the lesson's toy speculative decode simulator",
                              description="Monte-Carlo decode loop with and without speculation over an alpha x K "
                                          "grid; prints break-even, speedup and P50/P99 ITL and answers the "
                                          "lesson's exercises. Default: Llama-3.3-70B fp8 on 4x H100.")
    _add_hardware_args(s)
    mg = s.add_mutually_exclusive_group()
    mg.add_argument("--model-config", help="HF config.json of the target")
    mg.add_argument("--model", choices=sorted(cmod.MODEL_PRESETS), default=None, help="model preset (llama-3.3-70b)")
    s.add_argument("--dtype", choices=["bf16", "fp8", "int8", "int4"], default=None, help="weight dtype (fp8)")
    s.add_argument("--tp", type=int, default=None, help="tensor parallel size (4)")
    s.add_argument("--context", type=int, default=1024, help="context tokens per request (1024)")
    s.add_argument("--method", choices=list(cmod.DRAFT_METHODS), default=None,
                   help="use this drafter's modelled cost instead of --overhead")
    s.add_argument("--draft-cost", type=float, default=None, help="draft cost per drafted token (overrides --overhead)")
    s.add_argument("--overhead", type=float, default=0.15,
                   help="lesson's epsilon: draft overhead at batch 1 for K=5 (0.15); batch growth comes from the model")
    s.add_argument("--alphas", type=_floats, default=[0.3, 0.5, 0.7], help="alpha grid (0.3,0.5,0.7)")
    s.add_argument("--k", type=_ints, default=[1, 3, 5], help="K grid (1,3,5)")
    s.add_argument("--batch", type=_ints, default=[1, 64, 256], help="batch sizes (1,64,256)")
    s.add_argument("--tokens", type=int, default=256, help="output tokens per request (256)")
    s.add_argument("--requests", type=int, default=32, help="requests simulated per cell (32)")
    s.add_argument("--jitter", type=float, default=0.05, help="lognormal sigma of step time (0.05)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--traffic", type=_traffic, default=_traffic("chat=0.7:0.7,code=0.3:0.4"),
                   help="name=share:alpha,... for the blended-alpha exercise")
    s.add_argument("--itl-mean-change", type=float, default=-0.25, help="observed mean ITL change (-0.25)")
    s.add_argument("--itl-p99-change", type=float, default=0.15, help="observed P99 ITL change (+0.15)")
    s.add_argument("--format", choices=["table", "json"], default="table")
    s.set_defaults(func=cmd_simulate)

    pl = subparsers.add_parser("plan", help="staged rollout plan (markdown)",
                               description="Staged speculative-decoding rollout plan with numbers from the cost model.")
    _add_hardware_args(pl)
    mg = pl.add_mutually_exclusive_group()
    mg.add_argument("--model-config", help="HF config.json of the target")
    mg.add_argument("--model", choices=sorted(cmod.MODEL_PRESETS), default=None, help="model preset (llama-3.3-70b)")
    pl.add_argument("--dtype", choices=["bf16", "fp8", "int8", "int4"], default=None, help="weight dtype (fp8)")
    pl.add_argument("--tp", type=int, default=None, help="tensor parallel size (4)")
    pl.add_argument("--context", type=int, default=2048, help="context tokens per request (2048)")
    pl.add_argument("--prompt-tokens", type=int, default=1024, help="prompt length for the TTFT estimate (1024)")
    pl.add_argument("--method", choices=[m for m in cmod.DRAFT_METHODS if m != "auto"], default="eagle3")
    pl.add_argument("--draft-cost", type=float, default=None)
    pl.add_argument("--k", type=int, default=3, help="num_speculative_tokens (3)")
    pl.add_argument("--traffic", type=_traffic, default=_traffic("chat=0.7:0.7,code=0.3:0.4"),
                    help="name=share:alpha,... (chat=0.7:0.7,code=0.3:0.4)")
    pl.add_argument("--concurrency", type=int, default=64, help="target concurrency (64)")
    pl.add_argument("--max-batch", type=int, default=512, help="largest batch the schedule covers (512)")
    pl.add_argument("--margin", type=float, default=0.02, help="alpha margin above break-even (0.02)")
    pl.add_argument("--min-drafts", type=int, default=500)
    pl.add_argument("--hold", type=int, default=2)
    pl.set_defaults(func=cmd_plan)

    m = subparsers.add_parser("memory", help="memory of an EAGLE-3 head vs a classic draft model",
                              description="Weights + KV of an EAGLE-3 head and of a draft model for a target.")
    _add_hardware_args(m)
    mg = m.add_mutually_exclusive_group()
    mg.add_argument("--model-config", help="HF config.json of the target")
    mg.add_argument("--model", choices=sorted(cmod.MODEL_PRESETS), default=None, help="target preset (llama-3.3-70b)")
    m.add_argument("--dtype", choices=["bf16", "fp8", "int8", "int4"], default=None, help="target weights (fp8)")
    m.add_argument("--tp", type=int, default=None, help="tensor parallel size (4)")
    m.add_argument("--context", type=int, default=2048, help="context tokens per request (2048)")
    dg = m.add_mutually_exclusive_group()
    dg.add_argument("--draft-model", choices=sorted(cmod.MODEL_PRESETS), default="llama-3.2-1b")
    dg.add_argument("--draft-model-config", help="HF config.json of the draft model")
    m.add_argument("--draft-dtype", choices=["bf16", "fp8", "int8", "int4"], default="bf16")
    m.add_argument("--draft-vocab", type=int, default=cmod.EAGLE3_DRAFT_VOCAB,
                   help=f"EAGLE-3 draft vocabulary ({cmod.EAGLE3_DRAFT_VOCAB})")
    m.add_argument("--concurrency", type=int, default=64)
    m.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    m.add_argument("--format", choices=["table", "json"], default="table")
    m.set_defaults(func=cmd_memory)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specwatch-lesson")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
