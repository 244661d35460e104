"""``specwatch breakeven``: break-even acceptance rate alpha*(B, K) and the speedup at a given alpha."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

from specwatch import costmodel as cmod
from specwatch.config.result import Config
from specwatch.lesson.options import (
    DEFAULT_TARGET,
    FORMATS,
    TargetBasis,
    check_fractions,
    cost_model_from_flags,
    describe,
    emit_csv,
    emit_json,
    ints,
    load_profile,
    positive,
    rounded,
    schema_type,
    target_basis,
    target_options,
    usage_error,
    with_draft_k,
)

BreakevenRow = dict[str, float | str | None]

#: The sidecar's answer at a row, as JSON fields (the order they are printed in).
SIDECAR_FIELDS = ("drafts", "verdict", "expected_speedup_lower", "expected_speedup_upper", "loss_probability")
#: The longest window of the sidecar's default config, whose drafts --drafts defaults to.
WINDOW_SECONDS = max(Config().windows)


class SidecarAnswer(Protocol):
    """What the sidecar's first evaluation decides at one row (the CLI passes it in: the lesson does
    not import the verdict): ``SIDECAR_FIELDS``, ``drafts`` None meaning a full window's."""

    def __call__(
        self, cm: cmod.CostModel, *, batch: int, k: int, alpha: float, drafts: float | None, method: str
    ) -> Mapping[str, float | str | None]: ...


#: The lesson's draft + verify overhead, a constant share of a plain step.
LESSON_EPSILON = 0.15


def breakeven_rows(
    cm: cmod.CostModel,
    batches: Sequence[int],
    ks: Sequence[int],
    alpha: float | None,
    *,
    sidecar: SidecarAnswer | None = None,
    drafts: float | None = None,
    method: str = "auto",
) -> list[BreakevenRow]:
    """One row per batch x K. Each K gets the model built for that K (the per-proposal draft cost is
    spread over it), so a row is the same whichever other K values are asked for. With ``alpha`` and
    ``sidecar``, each row also carries what the sidecar's first evaluation would decide there over
    ``drafts`` drafts (None: a full window's at that batch)."""
    rows: list[BreakevenRow] = []
    models = {k: with_draft_k(cm, k) for k in ks}
    for b in batches:
        for k in ks:
            cm = models[k]
            parts = cmod.overhead_breakdown(cm, b, k)
            rows.append(
                {
                    "batch": int(b),
                    "k": int(k),
                    "breakeven_acceptance_rate": rounded(cmod.breakeven_acceptance_rate(cm, b, k)),
                    "expected_speedup": None if alpha is None else rounded(cmod.expected_speedup(cm, b, k, alpha)),
                    "epsilon": rounded(parts.epsilon),
                    "epsilon_verify": rounded(parts.verify),
                    "epsilon_drafting": rounded(parts.drafting),
                    "epsilon_fixed": rounded(parts.fixed),
                }
            )
            if alpha is not None and sidecar is not None:
                answer = sidecar(cm, batch=int(b), k=int(k), alpha=alpha, drafts=drafts, method=method)
                rows[-1].update({name: _json_value(answer.get(name)) for name in SIDECAR_FIELDS})
    return rows


def _json_value(value: float | str | None) -> float | str | None:
    return value if value is None or isinstance(value, (str, int)) else rounded(value)


def breakeven_table(
    cm: cmod.CostModel, rows: Sequence[BreakevenRow], alpha: float | None, basis: TargetBasis | None = None
) -> str:
    d = describe(cm)
    lines = [
        (
            f"# {d['model']} {d['dtype']} TP{d['tensor_parallel']} on {d['hardware']}, "
            f"{d['context_tokens_per_request']} context tokens/request, draft {d['draft_method']} "
            f"(c = {d['draft_cost_per_token']} of a step per drafted token)"
        )
    ]
    if basis is not None:
        lines.append(f"# {basis.line()}")
    sidecar = alpha is not None and any(r.get("verdict") is not None for r in rows)
    head = f"{'batch':>6} {'K':>3} {'break-even alpha':>17}"
    if alpha is not None:
        head += f" {'speedup @ alpha=' + format(alpha, 'g'):>20}"
    if sidecar:
        head += f" {'sidecar verdict':>17} {'P(S<1)':>6}"
    head += f"  {'epsilon = verify + drafting + fixed':>36}"
    lines.append(head)
    for r in rows:
        line = f"{r['batch']:>6} {r['k']:>3} {r['breakeven_acceptance_rate']:>17.3f}"
        if alpha is not None:
            line += f" {r['expected_speedup']:>19.2f}x"
        if sidecar:
            loss = r.get("loss_probability")
            line += f" {r.get('verdict') or '-':>17} {'-' if loss is None else format(loss, '.2f'):>6}"
        parts = (
            f"{r['epsilon']:.3f} = {r['epsilon_verify']:.3f} + {r['epsilon_drafting']:.3f} + {r['epsilon_fixed']:.3f}"
        )
        lines.append(f"{line}  {parts:>36}")
    lines.append("break-even >= 1 means speculation cannot pay at that batch size.")
    if sidecar:
        lines.append(
            "sidecar verdict: what the sidecar's first evaluation decides for a window of --drafts drafts at "
            "alpha (--format json: the drafts and the speedup's interval); P(S<1): the probability that "
            "speculation loses there."
        )
    lines.extend(lesson_departure(d, sorted({int(r["k"] or 0) for r in rows})))
    return "\n".join(lines) + "\n"


def lesson_departure(d: dict[str, Any], ks: Sequence[int]) -> list[str]:
    """How these numbers relate to the lesson's alpha* = epsilon / K with a constant epsilon."""
    lesson = ", ".join(f"{LESSON_EPSILON / k:.3f} at K={k}" for k in ks)
    return [
        f"The lesson's alpha* = epsilon / K with its constant epsilon {LESSON_EPSILON:g} gives {lesson}.",
        "The break-even above is the same formula with epsilon (a speculative step's extra time over a plain",
        "step) priced at each batch: verify = the target reading B*(1+K) tokens instead of B (near 0 while",
        "decode is memory-bound, growing as the batch nears the compute knee); drafting = the drafter's",
        "passes; fixed = the serving engine's own costs of a speculative step "
        f"({d['spec_step_fixed_ms']} ms per step + {d['spec_request_fixed_ms']} ms per request;",
        "--engine charges an engine's own). The lesson's 'about 0.45-0.55 at high concurrency' is this",
        "rise, priced here for the target and engine in the header.",
    ]


def cmd_breakeven(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    check_fractions("--alpha", args.alpha)
    if args.drafts is not None and args.alpha is None:
        usage_error("--drafts needs --alpha: the sidecar's verdict is at an acceptance rate")
    cm = cost_model_from_flags(
        args,
        DEFAULT_TARGET,
        draft_method=args.method,
        draft_cost_per_token=args.draft_cost,
        draft_k=args.k[0],
        profile=load_profile(args.profile),
    )
    rows = breakeven_rows(
        cm,
        args.batch,
        args.k,
        args.alpha,
        sidecar=getattr(args, "sidecar", None),
        drafts=args.drafts,
        method=args.method or "auto",
    )
    basis = target_basis(args, DEFAULT_TARGET, cm)
    if args.format == "json":
        # What the table's header says: the target, what was assumed, the engine prior.
        emit_json({"target": basis.as_dict(), "assumptions": describe(cm, basis), "rows": rows}, out)
    elif args.format == "csv":
        emit_csv(rows, out)
    else:
        out.write(breakeven_table(cm, rows, args.alpha, basis))
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "breakeven",
        help="break-even acceptance rate vs batch size",
        parents=[target_options(DEFAULT_TARGET)],
        description=(
            "Break-even vLLM acceptance rate alpha*(B, K) and the speedup at --alpha, with what the sidecar's "
            "first evaluation would decide there (verdict, the speedup's interval, P(speedup < 1)). Default "
            f"target: the sidecar's ({DEFAULT_TARGET.model} {DEFAULT_TARGET.dtype}, TP {DEFAULT_TARGET.tensor_parallel}, "
            f"{DEFAULT_TARGET.hardware}), engine prior {cmod.prior_for(DEFAULT_TARGET.engine).engine}; a flag left "
            "out is that default, printed as assumed."
        ),
    )
    p.add_argument("--method", choices=list(cmod.DRAFT_METHODS), default=None, help="drafter (auto = eagle3)")
    p.add_argument(
        "--draft-cost",
        type=schema_type("draft.cost_per_token"),
        default=None,
        help="draft cost per drafted token, fraction of a plain target step",
    )
    p.add_argument("--k", type=ints, required=True, help="draft length K (or a comma list)")
    p.add_argument("--batch", type=ints, required=True, help="comma list of batch sizes, e.g. 1,8,64,256")
    p.add_argument(
        "--alpha", type=float, default=None, help="acceptance rate in [0, 1] for the speedup and the sidecar's verdict"
    )
    p.add_argument(
        "--drafts",
        type=positive,
        default=None,
        metavar="N",
        help=(
            "drafts in the window the sidecar judges (alpha's sampling noise in its interval); default: a full "
            f"{WINDOW_SECONDS:g} s window's at each batch, batch x {WINDOW_SECONDS:g} s / T_spec(batch, K) "
            "(one draft per request per speculative step, T_spec from the cost model)"
        ),
    )
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="measured spec-off step-time profile (YAML, the sidecar's `profile:` format)",
    )
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_breakeven)
