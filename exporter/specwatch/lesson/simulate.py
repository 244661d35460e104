"""``specwatch simulate``: the lesson's toy decode loop with and without speculation, and its exercises."""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from specwatch import costmodel as cmod
from specwatch.lesson.options import (
    DEFAULT_TARGET,
    DEFAULT_TRAFFIC,
    FORMATS,
    TargetBasis,
    Traffic,
    check_fractions,
    cost_model_from_flags,
    describe,
    emit_csv,
    emit_json,
    floats,
    ints,
    non_negative,
    number,
    positive_int,
    rounded,
    schema_type,
    target_basis,
    target_options,
    traffic,
    usage_error,
    with_draft_k,
)

#: A grid progress report: cells done, cells in all.
Progress = Callable[[int, int], None]

#: The lesson's draft length for its exercises.
LESSON_K = 5


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank quantile of raw samples (the simulator has raw samples, not buckets)."""
    if not sorted_vals:
        return math.nan
    idx = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


def simulate_cell(
    rng: random.Random, t_base: float, t_spec: float, k: int, alpha: float, tokens: int, requests: int, jitter: float
) -> dict[str, float]:
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


@dataclass(frozen=True)
class SimulationGrid:
    """The Monte-Carlo grid and its sampling settings."""

    batches: Sequence[int]
    ks: Sequence[int]
    alphas: Sequence[float]
    tokens: int = 256
    requests: int = 32
    jitter: float = 0.05
    seed: int = 0


def _grid_rows(cm: cmod.CostModel, grid: SimulationGrid, progress: Progress | None = None) -> list[dict[str, Any]]:
    rng = random.Random(grid.seed)
    rows: list[dict[str, Any]] = []
    cells = len(grid.batches) * len(grid.ks) * len(grid.alphas)
    models = {k: with_draft_k(cm, k) for k in grid.ks}  # a row does not depend on the other K values
    for b in grid.batches:
        for k in grid.ks:
            cm = models[k]
            t_base = cm.base_step_time(b)
            t_spec = cm.spec_step_time(b, k)
            be = cmod.breakeven_acceptance_rate(cm, b, k)
            for alpha in grid.alphas:
                sim = simulate_cell(rng, t_base, t_spec, k, alpha, grid.tokens, grid.requests, grid.jitter)
                rows.append(
                    {
                        "batch": b,
                        "k": k,
                        "alpha": alpha,
                        "breakeven_acceptance_rate": rounded(be),
                        "expected_speedup": rounded(cmod.expected_speedup(cm, b, k, alpha)),
                        **{key: rounded(v, 6 if key.startswith("itl") else 4) for key, v in sim.items()},
                    }
                )
                if progress is not None:
                    progress(len(rows), cells)
    return rows


def _blended_traffic(cm: cmod.CostModel, grid: SimulationGrid, mix: Traffic) -> dict[str, Any]:
    blended = sum(s * a for _, s, a in mix)
    k_ref = LESSON_K if LESSON_K in grid.ks else max(grid.ks)
    return {
        "routes": [{"route": n, "share": rounded(s), "alpha": a} for n, s, a in mix],
        "blended_alpha": rounded(blended),
        "k": k_ref,
        "per_batch": [
            {
                "batch": b,
                "breakeven": rounded(cmod.breakeven_acceptance_rate(cm, b, k_ref)),
                "blended_speedup": rounded(cmod.expected_speedup(cm, b, k_ref, blended)),
                "net_positive": cmod.expected_speedup(cm, b, k_ref, blended) > 1.0,
                "routes_below_breakeven": [n for n, _, a in mix if a < cmod.breakeven_acceptance_rate(cm, b, k_ref)],
            }
            for b in grid.batches
        ],
    }


def _itl_diagnosis(cm: cmod.CostModel, itl_mean_change: float, itl_p99_change: float) -> dict[str, Any]:
    # Mean ITL fell by m while P99 (per step) rose by p: P99 tracks the spec step (1 + eps) and
    # the per-token mean tracks (1 + eps)/tau, so eps = p and tau = (1 + p)/(1 − m).
    m, p = -itl_mean_change, itl_p99_change
    tau = (1 + p) / (1 - m)
    diag_alpha = (tau - 1) / LESSON_K
    rates = cmod.position_rates_from_alpha(min(max(diag_alpha, 0.0), 1.0), LESSON_K)
    return {
        "mean_itl_change": -m,
        "p99_itl_change": p,
        "k": LESSON_K,
        "implied_overhead": rounded(p),
        "implied_tau": rounded(tau),
        "implied_alpha": rounded(diag_alpha),
        "recommended_k_at_batch_1": cmod.best_draft_length(cm, 1, rates),
        "explanation": (
            "vLLM's ITL histogram records one latency per engine step. With speculation a step "
            "carries 1 + K*alpha tokens on average, so the per-token mean falls, but every step costs "
            "T_spec = T_base*(1+overhead), and a step whose drafts are all rejected delivers one token "
            "after that longer wait: the P99 rises by about the overhead. At full batch the overhead "
            "grows (verification leaves the memory-bound regime), widening the gap."
        ),
        "mitigation": (
            "shorten K (or a batch-size schedule) so that the overhead per step falls, train or pick "
            "a drafter with higher alpha on this traffic, and gate P99 ITL against the spec-off baseline"
        ),
    }


def simulate_report(
    cm: cmod.CostModel,
    grid: SimulationGrid,
    mix: Traffic,
    *,
    itl_mean_change: float,
    itl_p99_change: float,
    progress: Progress | None = None,
    basis: TargetBasis | None = None,
) -> dict[str, Any]:
    """The grid plus the lesson's answers: alpha for 2x/3x, overhead sensitivity, blended traffic
    and the mean-vs-P99 ITL diagnosis. ``basis``: what the flags left to the defaults (the header's
    target line)."""
    rows = _grid_rows(cm, grid, progress)
    answers: dict[str, Any] = {}
    answers["alpha_for_speedup_at_k5"] = [
        {
            "batch": b,
            "alpha_for_2x": rounded(alpha_for_speedup(cm, b, LESSON_K, 2.0)),
            "alpha_for_3x": rounded(alpha_for_speedup(cm, b, LESSON_K, 3.0)),
        }
        for b in grid.batches
    ]
    # Lesson form: S = (1 + K·alpha)/(1 + eps) -> alpha = (S(1 + eps) − 1)/K at K=5.
    answers["overhead_sensitivity_k5"] = [
        {
            "overhead": eps,
            "breakeven": rounded(eps / 5),
            "alpha_for_2x": rounded((2 * (1 + eps) - 1) / 5),
            "alpha_for_3x": rounded((3 * (1 + eps) - 1) / 5) if (3 * (1 + eps) - 1) / 5 <= 1 else None,
        }
        for eps in (0.05, 0.10, 0.15, 0.25, 0.50)
    ]
    # Where the model departs from the lesson's constant epsilon: the same formula, epsilon priced.
    answers["epsilon_by_batch_k5"] = [
        {
            "batch": b,
            "epsilon": rounded((parts := cmod.overhead_breakdown(cm, b, LESSON_K)).epsilon),
            "verify": rounded(parts.verify),
            "drafting": rounded(parts.drafting),
            "fixed": rounded(parts.fixed),
            "breakeven": rounded(parts.epsilon / LESSON_K),
        }
        for b in grid.batches
    ]
    answers["blended_traffic"] = _blended_traffic(cm, grid, mix)
    answers["itl_diagnosis"] = _itl_diagnosis(cm, itl_mean_change, itl_p99_change)
    return {
        "model": describe(cm, basis),
        **({} if basis is None else {"target": basis.as_dict()}),
        "seed": grid.seed,
        "tokens_per_request": grid.tokens,
        "requests": grid.requests,
        "jitter": grid.jitter,
        "grid": rows,
        "answers": answers,
    }


def _target_line(target: dict[str, Any]) -> str:
    return TargetBasis(
        hardware=target["hardware"],
        model=target["model"],
        dtype=target["dtype"],
        tensor_parallel=target["tensor_parallel"],
        context_tokens=target["context_tokens_per_request"],
        engine_prior=target["engine_prior"],
        assumed=tuple(target["assumed"]),
        setup_assumed=target["setup_assumed"],
    ).line()


def _alpha(value: float | None) -> str:
    """An acceptance rate as printed: three decimals, or 'unreachable' (never Python's None)."""
    return "unreachable" if value is None else f"{value:.3f}"


def simulate_text(rep: dict[str, Any]) -> str:
    d = rep["model"]
    lines = [
        (
            f"# toy decode loop: {d['model']} {d['dtype']} TP{d['tensor_parallel']} on {d['hardware']}, "
            f"{d['context_tokens_per_request']} ctx, draft cost {d['draft_cost_per_token']} of a step per token, "
            f"seed {rep['seed']}, {rep['requests']}x{rep['tokens_per_request']} tokens"
        ),
        *([f"# {_target_line(rep['target'])}"] if rep.get("target") else []),
        *([f"# draft cost from {rep['draft_cost_source']}"] if rep.get("draft_cost_source") else []),
        (
            f"{'B':>4} {'K':>2} {'alpha':>5} {'a*':>6} {'S(model)':>8} {'S(sim)':>7} "
            f"{'ITL/tok off':>11} {'on':>8} {'P50 off':>8} {'on':>8} {'P99 off':>8} {'on':>8}  (ms)"
        ),
    ]
    for g in rep["grid"]:
        lines.append(
            f"{g['batch']:>4} {g['k']:>2} {g['alpha']:>5.2f} {g['breakeven_acceptance_rate']:>6.3f} "
            f"{g['expected_speedup']:>7.2f}x {g['measured_speedup']:>6.2f}x "
            f"{g['itl_mean_per_token_off'] * 1e3:>11.2f} {g['itl_mean_per_token_on'] * 1e3:>8.2f} "
            f"{g['itl_p50_off'] * 1e3:>8.2f} {g['itl_p50_on'] * 1e3:>8.2f} "
            f"{g['itl_p99_off'] * 1e3:>8.2f} {g['itl_p99_on'] * 1e3:>8.2f}"
        )
    a = rep["answers"]
    lines.append("\n## alpha needed at K=5 (this model)")
    for r in a["alpha_for_speedup_at_k5"]:
        lines.append(
            f"  batch {r['batch']}: 2x at alpha {_alpha(r['alpha_for_2x'])}, 3x at alpha {_alpha(r['alpha_for_3x'])}"
        )
    lines.append("\n## sensitivity to verify overhead (lesson form, K=5)")
    for r in a["overhead_sensitivity_k5"]:
        lines.append(
            f"  overhead {r['overhead']:.2f}: break-even {_alpha(r['breakeven'])}, "
            f"2x at {_alpha(r['alpha_for_2x'])}, 3x at {_alpha(r['alpha_for_3x'])}"
        )
    lines.append("\n## the same formula with this model's epsilon (K=5): break-even = epsilon / 5")
    for r in a["epsilon_by_batch_k5"]:
        lines.append(
            f"  batch {r['batch']}: epsilon {r['epsilon']:.3f} = verify {r['verify']:.3f} + drafting "
            f"{r['drafting']:.3f} + fixed {r['fixed']:.3f} -> break-even {_alpha(r['breakeven'])}"
        )
    lines.append(
        "  verify: the target reading B*(1+K) tokens instead of B; drafting: the drafter's passes; fixed: the"
        " engine's own per-step and per-request costs of speculation. The grid's a* uses this epsilon, the"
        " lesson-form section above a constant one."
    )
    bt = a["blended_traffic"]
    mix = ", ".join("{} {:.0f}% @ {:.3f}".format(r["route"], r["share"] * 100, r["alpha"]) for r in bt["routes"])
    lines.append(f"\n## blended traffic: alpha = {_alpha(bt['blended_alpha'])} ({mix}), K={bt['k']}")
    for r in bt["per_batch"]:
        below = ", ".join(r["routes_below_breakeven"]) or "none"
        lines.append(
            f"  batch {r['batch']}: break-even {_alpha(r['breakeven'])}, "
            f"blended speedup {r['blended_speedup']:.2f}x, "
            f"net {'positive' if r['net_positive'] else 'NEGATIVE'}; routes below break-even: {below}"
        )
    dg = a["itl_diagnosis"]
    lines.append(
        f"\n## mean ITL {dg['mean_itl_change']:+.0%} but P99 ITL {dg['p99_itl_change']:+.0%}\n"
        f"  implies overhead {dg['implied_overhead']:.3f}, tau {dg['implied_tau']:.3f}, "
        f"alpha {_alpha(dg['implied_alpha'])} "
        f"at K=5; best K at batch 1: {dg['recommended_k_at_batch_1']}\n  {dg['explanation']}\n"
        f"  Mitigate: {dg['mitigation']}."
    )
    return "\n".join(lines) + "\n"


def implied_alpha(itl_mean_change: float, itl_p99_change: float) -> float:
    """The acceptance rate at K=5 that a mean and a P99 ITL change imply (see _itl_diagnosis)."""
    return ((1 + itl_p99_change) / (1 + itl_mean_change) - 1) / LESSON_K


def check_itl_changes(itl_mean_change: float, itl_p99_change: float) -> None:
    """The diagnosis reads a P99 (per step) that rose by the verify overhead and a per-token mean
    that moved by less: changes that imply a negative overhead or an acceptance rate outside
    [0, 1] describe no speculative server, and the canned explanation would contradict them."""
    if itl_p99_change < 0:
        usage_error(
            f"--itl-p99-change {itl_p99_change:g}: with speculation the per-step P99 cannot fall "
            "(it rises by the verify overhead); give the observed change, >= 0"
        )
    alpha = implied_alpha(itl_mean_change, itl_p99_change)
    if not 0.0 <= alpha <= 1.0:
        usage_error(
            f"--itl-mean-change {itl_mean_change:g} with --itl-p99-change {itl_p99_change:g} implies an "
            f"acceptance rate of {alpha:.3f} at K={LESSON_K}, outside [0, 1]: the mean per-token ITL must "
            "change by no more than the P99 (and fall by at most the speculative speedup)"
        )


class _GridProgress:
    """Progress on stderr for a grid that runs longer than a couple of seconds."""

    def __init__(self, err: IO[str], every: float = 2.0) -> None:
        self.err, self.every = err, every
        self.start = self.last = time.monotonic()

    def __call__(self, done: int, cells: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every or done == cells:
            return
        self.last = now
        elapsed = now - self.start
        left = elapsed / done * (cells - done)
        print(
            f"specwatch simulate: {done}/{cells} cells, {elapsed:.0f}s so far, about {left:.0f}s left",
            file=self.err,
            flush=True,
        )


def cmd_simulate(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    check_fractions("--alphas", args.alphas)
    check_itl_changes(args.itl_mean_change, args.itl_p99_change)
    draft_cost = args.draft_cost
    source = "--draft-cost" if draft_cost is not None else f"--method {args.method}: priced as breakeven does"
    if draft_cost is None and args.method is None:
        # The lesson's epsilon: total draft+verify overhead at batch 1 for K=5.
        draft_cost = args.overhead / 5.0
        source = (
            f"the lesson's epsilon (--overhead {args.overhead:g} / K=5); breakeven prices the drafter by its "
            "method instead: pass --method to compare the two"
        )
    cm = cost_model_from_flags(
        args, DEFAULT_TARGET, draft_method=args.method, draft_cost_per_token=draft_cost, draft_k=max(args.k)
    )
    grid = SimulationGrid(
        batches=args.batch,
        ks=args.k,
        alphas=args.alphas,
        tokens=args.tokens,
        requests=args.requests,
        jitter=args.jitter,
        seed=args.seed,
    )
    rep = simulate_report(
        cm,
        grid,
        args.traffic,
        itl_mean_change=args.itl_mean_change,
        itl_p99_change=args.itl_p99_change,
        progress=_GridProgress(sys.stderr),
        basis=target_basis(args, DEFAULT_TARGET, cm),
    )
    rep["draft_cost_source"] = source
    if args.format == "json":
        emit_json(rep, out)
    elif args.format == "csv":
        emit_csv(rep["grid"], out)
    else:
        out.write(simulate_text(rep))
    return 0


#: A relative change: -0.25 is 25% lower; below -1 a latency would be negative.
_change = number(minimum=-1, exclusive_minimum=True)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser(
        "simulate",
        help="the lesson's toy speculative decode simulator",
        parents=[target_options(replace(DEFAULT_TARGET, context_tokens=1024))],
        description="Monte-Carlo decode loop with and without speculation over an alpha x K "
        "grid; prints break-even, speedup and P50/P99 ITL and answers the "
        f"lesson's exercises. Default target: the sidecar's ({DEFAULT_TARGET.model} {DEFAULT_TARGET.dtype}, "
        f"TP {DEFAULT_TARGET.tensor_parallel}, {DEFAULT_TARGET.hardware}), engine prior "
        f"{cmod.prior_for(DEFAULT_TARGET.engine).engine}.",
    )
    s.add_argument(
        "--method",
        choices=list(cmod.DRAFT_METHODS),
        default=None,
        help="use this drafter's modelled cost instead of --overhead",
    )
    s.add_argument(
        "--draft-cost",
        type=schema_type("draft.cost_per_token"),
        default=None,
        help="draft cost per drafted token (overrides --overhead)",
    )
    s.add_argument(
        "--overhead",
        type=non_negative,
        default=0.15,
        help="lesson's epsilon: draft overhead at batch 1 for K=5 (0.15); batch growth comes from the model",
    )
    s.add_argument("--alphas", type=floats, default=[0.3, 0.5, 0.7], help="alpha grid (0.3,0.5,0.7)")
    s.add_argument("--k", type=ints, default=[1, 3, 5], help="K grid (1,3,5)")
    s.add_argument("--batch", type=ints, default=[1, 64, 256], help="batch sizes (1,64,256)")
    s.add_argument("--tokens", type=positive_int, default=256, help="output tokens per request (256)")
    s.add_argument("--requests", type=positive_int, default=32, help="requests simulated per cell (32)")
    s.add_argument("--jitter", type=non_negative, default=0.05, help="lognormal sigma of step time (0.05)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--traffic",
        type=traffic,
        default=traffic(DEFAULT_TRAFFIC),
        help="name=share:alpha,... for the blended-alpha exercise",
    )
    s.add_argument("--itl-mean-change", type=_change, default=-0.25, help="observed mean ITL change (-0.25)")
    s.add_argument("--itl-p99-change", type=_change, default=0.15, help="observed P99 ITL change (+0.15)")
    s.add_argument("--format", choices=FORMATS, default="table")
    s.set_defaults(func=cmd_simulate)
