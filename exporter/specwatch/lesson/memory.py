"""``specwatch memory``: weights + KV of an EAGLE-3 head vs a classic draft model for one target,
and whether each configuration fits the GPUs (exit status 1 when one does not)."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

from specwatch import costmodel as cmod
from specwatch.lesson.options import (
    DEFAULT_TARGET,
    DTYPE_CHOICES,
    FORMATS,
    TargetBasis,
    cost_model_from_flags,
    emit_csv,
    emit_json,
    load_json,
    number,
    positive_int,
    rounded,
    target_basis,
    target_options,
)


def memory_report(
    cm: cmod.CostModel,
    draft: cmod.ModelSpec,
    *,
    draft_dtype: str,
    draft_vocab: int,
    concurrency: int,
    context_tokens: int,
    gpu_memory_utilization: float,
    basis: TargetBasis | None = None,
) -> dict[str, Any]:
    """Memory of each component at ``concurrency`` requests of ``context_tokens``, and the KV cache
    capacity each drafter costs the target (``basis``: which target settings were assumed)."""
    target = cm.model
    tokens = concurrency * context_tokens
    kv_scale = 1.0  # KV cache in bf16
    head_params = cmod.draft_head_params(target, "eagle3", draft_vocab=draft_vocab)
    items: dict[str, dict[str, Any]] = {
        "target": {
            "params": target.total_params,
            "weights_bytes": cmod.model_total_weight_bytes(target, cm.dtype),
            "kv_bytes_per_token": target.kv_bytes_per_token_bf16 * kv_scale,
        },
        "eagle3_head": {
            "params": head_params,
            "weights_bytes": head_params * 2.0,
            "kv_bytes_per_token": cmod.draft_head_kv_bytes_per_token(target) * kv_scale,
        },
        "draft_model": {
            "name": draft.name,
            "params": draft.total_params,
            "weights_bytes": cmod.model_total_weight_bytes(draft, draft_dtype),
            "kv_bytes_per_token": draft.kv_bytes_per_token_bf16 * kv_scale,
        },
    }
    for v in items.values():
        v["kv_bytes_at_load"] = v["kv_bytes_per_token"] * tokens
        v["total_bytes_at_load"] = v["weights_bytes"] + v["kv_bytes_at_load"]
    gpu = cm.hardware.memory_bytes
    budget = None if gpu is None else gpu * cm.tensor_parallel * gpu_memory_utilization
    capacity = {}
    for name in ("eagle3_head", "draft_model"):
        extra = items[name]
        if budget is not None:
            free_plain = budget - items["target"]["weights_bytes"]
            free_spec = free_plain - extra["weights_bytes"]
            plain_tokens = free_plain / items["target"]["kv_bytes_per_token"]
            spec_tokens = free_spec / (items["target"]["kv_bytes_per_token"] + extra["kv_bytes_per_token"])
            capacity[name] = {
                "kv_tokens_without": int(max(plain_tokens, 0)),
                "kv_tokens_with": int(max(spec_tokens, 0)),
                "kv_capacity_lost": rounded(1 - spec_tokens / plain_tokens) if plain_tokens > 0 else None,
            }
    gb = 1e9
    # Does each configuration fit? Weights + KV at this load (+ the drafter's) against what vLLM
    # may use: GPU memory x TP x gpu_memory_utilization. Activations and CUDA graphs are left out,
    # so "fits" is necessary, not sufficient.
    fit: dict[str, Any] | None = None
    if budget is not None:
        plain = items["target"]["total_bytes_at_load"]
        needed = {
            "target_alone": plain,
            "with_eagle3_head": plain + items["eagle3_head"]["total_bytes_at_load"],
            "with_draft_model": plain + items["draft_model"]["total_bytes_at_load"],
        }
        fit = {
            "budget_gb": rounded(budget / gb, 3),
            "gpu_memory_utilization": gpu_memory_utilization,
            "configurations": {
                name: {"needed_gb": rounded(b / gb, 3), "fits": b <= budget} for name, b in needed.items()
            },
        }
    components = {}
    for key, v in items.items():
        c = {
            "params_billion": rounded(v["params"] / 1e9, 3),
            "weights_gb": rounded(v["weights_bytes"] / gb, 3),
            "kv_bytes_per_token": round(v["kv_bytes_per_token"]),
            "kv_gb_at_load": rounded(v["kv_bytes_at_load"] / gb, 3),
            "total_gb_at_load": rounded(v["total_bytes_at_load"] / gb, 3),
        }
        if "name" in v:
            c["name"] = v["name"]
        components[key] = c
    return {
        "target": {
            "model": target.name,
            "dtype": cm.dtype,
            "tensor_parallel": cm.tensor_parallel,
            "hardware": cm.hardware.name,
            "concurrency": concurrency,
            "context_tokens": context_tokens,
            **({} if basis is None else {"engine_prior": basis.engine_prior, "assumed": list(basis.assumed)}),
        },
        "components": components,
        "kv_capacity": capacity,
        "fit": fit,
        "eagle3_vs_draft_model_memory_ratio": rounded(
            items["eagle3_head"]["total_bytes_at_load"] / items["draft_model"]["total_bytes_at_load"]
        ),
    }


def memory_text(rep: dict[str, Any]) -> str:
    t = rep["target"]
    lines = [
        (
            f"# memory of a drafter for {t['model']} ({t['dtype']}, TP{t['tensor_parallel']}, {t['hardware']}) "
            f"at {t['concurrency']} requests x {t['context_tokens']} context tokens"
        ),
        *(
            [f"# assumed (not given): {', '.join(t['assumed']) or 'nothing'}; engine prior {t['engine_prior']}"]
            if "assumed" in t
            else []
        ),
        (
            f"{'component':<14} {'params (B)':>10} {'weights GB':>11} {'KV B/token':>11} {'KV GB at load':>14} "
            f"{'total GB':>9}"
        ),
    ]
    for name, c in rep["components"].items():
        lines.append(
            f"{name:<14} {c['params_billion']:>10.3f} {c['weights_gb']:>11.2f} {c['kv_bytes_per_token']:>11} "
            f"{c['kv_gb_at_load']:>14.2f} {c['total_gb_at_load']:>9.2f}"
        )
    for name, c in rep["kv_capacity"].items():
        if c["kv_tokens_without"] <= 0:
            lines.append(f"{name}: the target's weights alone do not fit; raise --tp")
            continue
        lines.append(
            f"{name}: KV cache capacity {c['kv_tokens_without']} -> {c['kv_tokens_with']} tokens "
            f"({c['kv_capacity_lost']:.1%} lost)"
        )
    lines.append(
        f"EAGLE-3 head needs {rep['eagle3_vs_draft_model_memory_ratio']:.0%} of the draft model's memory at this load."
    )
    fit = rep.get("fit")
    if fit is None:
        lines.append("fit: GPU memory unknown for this hardware; not checked")
    else:
        for name, row in fit["configurations"].items():
            verdict = "fits" if row["fits"] else "DOES NOT FIT"
            lines.append(
                f"{name.replace('_', ' ')}: {verdict}: needs {row['needed_gb']:.2f} GB of "
                f"{fit['budget_gb']:.2f} GB (GPU memory x TP{t['tensor_parallel']} x "
                f"gpu_memory_utilization {fit['gpu_memory_utilization']})"
            )
    return "\n".join(lines) + "\n"


def configurations_not_fitting(rep: dict[str, Any]) -> list[str]:
    """Names of the configurations whose weights + KV exceed the memory budget."""
    fit = rep.get("fit")
    if fit is None:
        return []
    return [name for name, row in fit["configurations"].items() if not row["fits"]]


def cmd_memory(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    cm = cost_model_from_flags(args, DEFAULT_TARGET)
    if args.draft_model_config:
        draft = cmod.model_spec_from_hf_config(
            load_json(args.draft_model_config, "--draft-model-config"), name=args.draft_model_config
        )
    else:
        draft = cmod.MODEL_PRESETS[args.draft_model]
    rep = memory_report(
        cm,
        draft,
        draft_dtype=args.draft_dtype,
        draft_vocab=args.draft_vocab,
        concurrency=args.concurrency,
        context_tokens=args.context,
        gpu_memory_utilization=args.gpu_memory_utilization,
        basis=target_basis(args, DEFAULT_TARGET, cm),
    )
    if args.format == "json":
        emit_json(rep, out)
    elif args.format == "csv":
        emit_csv([{"component": name, **fields} for name, fields in rep["components"].items()], out)
    else:
        out.write(memory_text(rep))
    # Exit 1 when a configuration does not fit, so a script can tell (the report says which).
    return 1 if configurations_not_fitting(rep) else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = subparsers.add_parser(
        "memory",
        help="memory of an EAGLE-3 head vs a classic draft model",
        parents=[target_options(DEFAULT_TARGET, role="target")],
        description="Weights + KV of an EAGLE-3 head and of a draft model for a target.",
    )
    dg = m.add_mutually_exclusive_group()
    dg.add_argument("--draft-model", choices=sorted(cmod.MODEL_PRESETS), default=cmod.DEFAULT_DRAFT_MODEL)
    dg.add_argument("--draft-model-config", help="HF config.json of the draft model")
    m.add_argument("--draft-dtype", choices=DTYPE_CHOICES, default="bf16")
    m.add_argument(
        "--draft-vocab",
        type=positive_int,
        default=cmod.EAGLE3_DRAFT_VOCAB,
        help=f"EAGLE-3 draft vocabulary ({cmod.EAGLE3_DRAFT_VOCAB})",
    )
    m.add_argument("--concurrency", type=positive_int, default=64)
    m.add_argument(
        "--gpu-memory-utilization",
        type=number(minimum=0, maximum=1, exclusive_minimum=True),
        default=0.9,
        help="fraction of GPU memory vLLM may use, in (0, 1] (0.9)",
    )
    m.add_argument("--format", choices=FORMATS, default="table")
    m.set_defaults(func=cmd_memory)
