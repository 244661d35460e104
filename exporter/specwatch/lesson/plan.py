"""``specwatch plan``: a staged speculative-decoding rollout plan in markdown, numbers from the cost model."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import IO

from specwatch import costmodel as cmod
from specwatch.engines.vllm_schedule import complete_speculative_config, speculative_config
from specwatch.lesson.options import (
    DEFAULT_TARGET,
    DEFAULT_TRAFFIC,
    TargetBasis,
    Traffic,
    cost_model_from_flags,
    describe,
    positive_int,
    schema_type,
    target_basis,
    target_options,
    traffic,
)


@dataclass(frozen=True)
class Rollout:
    """What the plan is for: the drafter and K, the load, and specwatch's decision settings."""

    method: str
    k: int
    concurrency: int
    traffic: Traffic
    prompt_tokens: int = 1024
    max_batch: int = 512
    margin: float = 0.02
    min_drafts: int = 500
    hold: int = 2


def plan_markdown(cm: cmod.CostModel, rollout: Rollout, basis: TargetBasis | None = None) -> str:
    """The staged rollout plan, with every expected number from ``cm``; ``basis`` adds the line of
    what the target rests on (what the flags left to the defaults, the engine prior)."""
    b, k = rollout.concurrency, rollout.k
    traffic = rollout.traffic
    blended = sum(s * a for _, s, a in traffic)
    t_base = cm.base_step_time(b)
    t_spec = cm.spec_step_time(b, k)
    be = cmod.breakeven_acceptance_rate(cm, b, k)
    gate = be + rollout.margin
    prefill = cm.step_time(rollout.prompt_tokens, 0.0)  # one prompt alone, no queueing
    rates = cmod.position_rates_from_alpha(blended, k)
    sched = cmod.recommend_schedule(
        cm, rates, max(rollout.max_batch, b), live_batch=b, zero_band_speedup=cmod.zero_k_band_speedup
    )
    best = cmod.best_draft_length(cm, b, rates)
    config = speculative_config(rollout.method, k, sched) if any(x > 0 for *_, x in sched) else None
    # n-gram, suffix and MTP need no drafter path: then the whole flag, as vLLM accepts it pasted.
    complete = complete_speculative_config(config, rollout.method) if config else None
    weights = cmod.model_total_weight_bytes(cm.model, cm.dtype)
    kv_load = cm.kv_bytes_per_token * b * cm.context_tokens
    mem = cm.hardware.memory_bytes
    d = describe(cm)
    lines = [
        f"# Speculative decoding rollout plan: {d['model']} on {d['tensor_parallel']}x {d['hardware']}",
        "",
        *([f"{basis.line().capitalize()}.", ""] if basis is not None else []),
        (
            f"Inputs: {d['dtype']} weights, TP {d['tensor_parallel']}, drafter `{rollout.method}` with K={k}, "
            f"target concurrency {b}, {d['context_tokens_per_request']} context tokens per request, "
            f"traffic {', '.join(f'{n} {s:.0%} at alpha {a}' for n, s, a in traffic)} (blended alpha {blended:.3f})."
        ),
        (
            f"Model: specwatch cost model (MBU {cm.mbu}, MFU {cm.mfu}, c0 {cm.overhead_seconds * 1e3:.1f} ms, "
            f"draft cost {d['draft_cost_per_token']} of a step per drafted token). Estimates, to be replaced by "
            f"the measurements each stage asks for."
        ),
        "",
    ]
    if mem is not None:
        need = (weights + kv_load) / (mem * cm.tensor_parallel)
        lines += [
            f"Memory check: weights {weights / 1e9:.1f} GB + KV {kv_load / 1e9:.1f} GB at load = "
            f"{need:.0%} of {cm.tensor_parallel}x{mem / 1e9:.0f} GB"
            + (" -- does NOT fit: raise TP, use fp8 KV or lower concurrency/context." if need > 0.9 else "."),
            "",
        ]
    lines += [
        "## Stage 1 - baseline (speculation off)",
        f"- Serve the target plain; run `vllm bench serve` at concurrency {b}.",
        (
            f"- Expected: decode step {t_base * 1e3:.1f} ms, so ITL about {t_base * 1e3:.1f} ms per token, "
            f"throughput about {b / t_base:,.0f} output tokens/s; TTFT for a {rollout.prompt_tokens}-token prompt "
            f"without queueing about {prefill * 1e3:.0f} ms."
        ),
        (
            "- Record TTFT, mean and P99 ITL, and output tokens/s. Put the P99 ITL in specwatch's "
            "`routes[].baseline_itl_p99_seconds`."
        ),
        "",
        "## Stage 2 - enable speculation",
        (
            "- Start vLLM with this `--speculative-config`:"
            if complete
            else "- Add to `--speculative-config` (keep your drafter's `model` path):"
        ),
        "",
        "```json",
        (
            json.dumps(complete or config, separators=(", ", ": "))
            if config
            else "// the model says speculation does not pay"
        ),
        "```",
        "",
        (
            "- The `num_speculative_tokens_per_batch_size` schedule steps K down as concurrency rises "
            "(vLLM V1; `disable_by_batch_size` is ignored by V1 and is not used). It is disabled automatically with "
            "data parallel > 1: then use a fixed `num_speculative_tokens`."
        ),
        (
            f"- Expected at concurrency {b}: spec step {t_spec * 1e3:.1f} ms vs {t_base * 1e3:.1f} ms plain "
            f"(verify overhead {t_spec / t_base - 1:.0%}); best K at this concurrency {best}."
        ),
        "",
        "## Stage 3 - measure alpha per route",
        (
            "- Run specwatch beside vLLM with one route per traffic class; read "
            '`specwatch_acceptance_ratio{route=...,window="5m"}` after at least '
            f"{rollout.min_drafts} drafts per window."
        ),
        "",
        "| route | share | alpha (assumed) | break-even at this concurrency | expected speedup | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for n, s, a in [*traffic, ("blended", 1.0, blended)]:
        sp = cmod.expected_speedup(cm, b, k, a)
        verdict = "keep" if a >= gate else ("disable" if a < be - rollout.margin else "marginal")
        lines.append(f"| {n} | {s:.0%} | {a:.3f} | {be:.3f} | {sp:.2f}x | {verdict} |")
    fits = cmod.max_concurrency_by_memory(cm)
    b_max = cmod.max_speculative_batch_size(cm, k, blended, limit=max(fits or cmod.MAX_BATCH_LIMIT, 1))
    lines += [
        "",
        "## Stage 4 - gate at break-even",
        f"- Keep speculation only if alpha >= {gate:.3f} (break-even {be:.3f} + margin {rollout.margin}) on the "
        "production mix; at the blended alpha it pays up to "
        + (f"{b_max} concurrent requests" if b_max else "no concurrency at all")
        + (f" (memory holds at most {fits} requests of {int(cm.context_tokens)} tokens)." if fits is not None else "."),
        (
            "- A route below break-even: serve it from a replica without speculation (gateway routing) or train a "
            "domain drafter for it."
        ),
        "",
        "## Stage 5 - watch P99 ITL",
        (
            f"- vLLM's ITL is per step: expect P99 ITL to rise by about {t_spec / t_base - 1:.0%} (a fully rejected "
            f"draft waits one spec step for one token) while the per-token mean falls by about "
            f"{1 - t_spec / t_base / (1 + k * blended):.0%}."
        ),
        (
            f"- Alert when P99 ITL exceeds the baseline by more than {t_spec / t_base - 1 + 0.1:.0%} "
            "(specwatch `SpecDecodeITLP99Regression`)."
        ),
        "",
        "## Rollback trigger",
        (
            f"- `SpecDecodeBelowBreakeven` firing (specwatch verdict `disable` held for {rollout.hold} evaluations), or the "
            "P99 ITL regression above, or output tokens/s below the Stage 1 baseline at the same concurrency."
        ),
        (
            "- Action: remove `--speculative-config` (or apply the schedule above with K=0 for the affected band) and "
            "restart; vLLM V1 cannot disable speculation at runtime."
        ),
        "",
    ]
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    cm = cost_model_from_flags(
        args, DEFAULT_TARGET, draft_method=args.method, draft_cost_per_token=args.draft_cost, draft_k=args.k
    )
    rollout = Rollout(
        method=args.method,
        k=args.k,
        concurrency=args.concurrency,
        traffic=args.traffic,
        prompt_tokens=args.prompt_tokens,
        max_batch=args.max_batch,
        margin=args.margin,
        min_drafts=args.min_drafts,
        hold=args.hold,
    )
    out.write(plan_markdown(cm, rollout, target_basis(args, DEFAULT_TARGET, cm)))
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pl = subparsers.add_parser(
        "plan",
        help="staged rollout plan (markdown)",
        parents=[target_options(DEFAULT_TARGET)],
        description="Staged speculative-decoding rollout plan with numbers from the cost model.",
    )
    pl.add_argument(
        "--prompt-tokens", type=positive_int, default=1024, help="prompt length for the TTFT estimate (1024)"
    )
    pl.add_argument("--method", choices=[m for m in cmod.DRAFT_METHODS if m != "auto"], default="eagle3")
    pl.add_argument("--draft-cost", type=schema_type("draft.cost_per_token"), default=None)
    pl.add_argument("--k", type=schema_type("draft.k"), default=3, help="num_speculative_tokens (3)")
    pl.add_argument(
        "--traffic", type=traffic, default=traffic(DEFAULT_TRAFFIC), help=f"name=share:alpha,... ({DEFAULT_TRAFFIC})"
    )
    pl.add_argument("--concurrency", type=positive_int, default=64, help="target concurrency (64)")
    pl.add_argument("--max-batch", type=positive_int, default=512, help="largest batch the schedule covers (512)")
    pl.add_argument(
        "--margin", type=schema_type("decision.margin"), default=0.02, help="alpha margin above break-even (0.02)"
    )
    pl.add_argument("--min-drafts", type=schema_type("decision.min_drafts"), default=500)
    pl.add_argument("--hold", type=positive_int, default=2, help="evaluations a new verdict must hold (2)")
    pl.set_defaults(func=cmd_plan)
