"""Command-line options shared by the lesson commands, and the cost model they describe.

Every command builds its CostModel through ``costmodel.build_cost_model``, the constructor the
live sidecar uses, so ``specwatch breakeven`` and the sidecar agree for the same inputs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any, NoReturn

import yaml

from specwatch import costmodel as cmod
from specwatch.config.kinds import ConfigError, Context, Kind, Number
from specwatch.config.nodes import Items, Key, Section
from specwatch.config.result import SCHEMA, Config

#: A bad value found after parsing: ``specwatch <cmd>: error: <message>`` and exit 2 (the CLI prints it).
UsageError = argparse.ArgumentTypeError

DTYPE_CHOICES = ["bf16", "fp8", "int8", "int4"]
#: name=share:alpha traffic classes (shares add up to 1).
Traffic = list[tuple[str, float, float]]


def schema_kind(dotted: str) -> Kind:
    """The kind (with its bounds) of a config key, e.g. ``decision.margin``: a flag for the same
    quantity accepts exactly what the config file accepts."""
    node: Section | Key | Items = SCHEMA
    for step in dotted.split("."):
        keys = node.keys if isinstance(node, Section) else node.item.keys if isinstance(node, Items) else ()
        found = next((n for n in keys if n.name == step), None)
        if found is None:
            raise KeyError(dotted)
        node = found
    if not isinstance(node, Key):
        raise KeyError(dotted)
    return node.kind


def schema_type(dotted: str, kind: Kind | None = None) -> Any:
    """An argparse type checking the value against the config key ``dotted`` (its bounds, its units)."""
    checked = kind or schema_kind(dotted)

    def parse(text: str) -> Any:
        try:
            return checked.parse(text, dotted, Context())
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(f"{exc.reason} (as config key {dotted})") from None

    parse.__name__ = dotted.rsplit(".", 1)[-1]
    return parse


def number(
    *,
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> Any:
    """An argparse type for a bounded number of a flag the config schema does not have."""
    kind = Number(
        minimum=minimum,
        maximum=maximum,
        exclusive_minimum=exclusive_minimum,
        exclusive_maximum=exclusive_maximum,
        integer=integer,
    )

    def parse(text: str) -> Any:
        try:
            return kind.parse(text, "", Context())
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None

    return parse


positive_int = number(integer=True, minimum=1)
non_negative_int = number(integer=True, minimum=0)
positive = number(minimum=0, exclusive_minimum=True)
non_negative = number(minimum=0)
port = number(integer=True, minimum=0, maximum=65535)


def floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one number")
    return vals


def ints(text: str) -> list[int]:
    vals = floats(text)
    if any(v != int(v) or v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return [int(v) for v in vals]


def usage_error(message: str) -> NoReturn:
    """A bad flag value: the CLI prints ``specwatch <cmd>: error: <message>`` and exits 2."""
    raise UsageError(message)


def check_fractions(flag: str, values: float | Sequence[float] | None) -> None:
    """Acceptance rates are fractions of drafted tokens: anything outside [0, 1] is a typo."""
    if values is None:
        return
    for value in [values] if isinstance(values, (int, float)) else values:
        if not (0.0 <= value <= 1.0):
            usage_error(f"{flag} {value:g}: an acceptance rate must be in [0, 1]")


def load_profile(path: str | None) -> cmod.Profile | None:
    """``--profile FILE``: the measured step-time profile of the sidecar's ``profile:`` key."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        usage_error(f"--profile {path}: {exc.strerror or exc}")
    except yaml.YAMLError as exc:
        usage_error(f"--profile {path}: not YAML ({exc})")
    try:
        return cmod.parse_profile(data)
    except ValueError as exc:
        usage_error(f"--profile {path}: {exc}")


def traffic(text: str) -> Traffic:
    """``chat=0.7:0.7,code=0.3:0.4`` -> [(name, share, alpha)]; the shares must add up to 1."""
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
    if abs(total - 1.0) > 0.01:
        # Shares of 0.7 + 0.5 are a typo, not a mix: renormalising would hide it.
        raise argparse.ArgumentTypeError(f"traffic shares add up to {total:g}, not 1: {text!r}")
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"traffic: a route name appears twice in {text!r}")
    return [(n, s / total, a) for n, s, a in out]


DEFAULT_TRAFFIC = "chat=0.7:0.7,code=0.3:0.4"


@dataclass(frozen=True)
class ModelDefaults:
    """What a command assumes when the target options are left out (also shown in --help)."""

    model: str = cmod.DEFAULT_MODEL
    dtype: str = "bf16"
    tensor_parallel: int = 1
    context_tokens: int = 2048
    hardware: str = cmod.DEFAULT_HARDWARE
    #: The serving engine whose fixed costs of speculation are charged (costmodel.engine_priors).
    engine: str = "vllm"


_SIDECAR = Config()
#: Every lesson command's default target: the sidecar's own (config/result.py: the model
#: build_cost_model assumes when none is configured, its dtype, TP, context and hardware), priced
#: with the prior of vLLM's V1 engine (vllm-v1); printed in each header, ``--engine generic`` for the
#: generic constants the sidecar uses when ``engine`` is not configured.
DEFAULT_TARGET = ModelDefaults(
    model=cmod.DEFAULT_MODEL,
    dtype=_SIDECAR.model.dtype,
    tensor_parallel=_SIDECAR.tensor_parallel,
    context_tokens=_SIDECAR.model.context_tokens,
    hardware=_SIDECAR.hardware.preset or cmod.DEFAULT_HARDWARE,
)

ASSUMED = "assumed"


@dataclass(frozen=True)
class TargetBasis:
    """What a report's numbers rest on: the target, the engine prior, and which of them the flags
    left to the defaults (``assumed``): a partial override never inherits another model's setup."""

    hardware: str
    model: str
    dtype: str
    tensor_parallel: int
    context_tokens: int
    engine_prior: str  # costmodel.engine_priors name: vllm-v1, generic, ...
    assumed: tuple[str, ...] = ()  # of "hardware", "model", "dtype", "tensor_parallel", "engine_prior"
    #: Neither hardware nor model given (and no profile): the sidecar widens its interval for that.
    setup_assumed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware,
            "model": self.model,
            "dtype": self.dtype,
            "tensor_parallel": self.tensor_parallel,
            "context_tokens_per_request": self.context_tokens,
            "engine_prior": self.engine_prior,
            "assumed": list(self.assumed),
            "setup_assumed": self.setup_assumed,
        }

    def _tag(self, name: str) -> str:
        return f" ({ASSUMED})" if name in self.assumed else ""

    def line(self) -> str:
        """One header line: ``target: model llama-3.1-8b (assumed), ..., tensor_parallel 1 (assumed) ...``."""
        generic = "; --engine generic for the generic constants" if self.engine_prior != "generic" else ""
        return (
            f"target: model {self.model}{self._tag('model')}, dtype {self.dtype}{self._tag('dtype')}, "
            f"tensor_parallel {self.tensor_parallel}{self._tag('tensor_parallel')}, "
            f"hardware {self.hardware}{self._tag('hardware')}; "
            f"engine prior {self.engine_prior}{self._tag('engine_prior')}{generic}"
            + (
                "; hardware and model both assumed: the speedup's interval is widened, as the sidecar's"
                if self.setup_assumed
                else ""
            )
        )


def target_options(defaults: ModelDefaults, role: str = "model") -> argparse.ArgumentParser:
    """The parent parser of every lesson command: GPU, target model, dtype, TP and context."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group(f"hardware (default: {defaults.hardware})")
    g.add_argument("--hardware", choices=sorted(cmod.HARDWARE_PRESETS), default=None, help="GPU preset")
    g.add_argument(
        "--bandwidth",
        type=schema_type("hardware.bandwidth_bytes_per_second"),
        default=None,
        help="HBM bytes/s (instead of --hardware)",
    )
    g.add_argument(
        "--flops", type=schema_type("hardware.flops"), default=None, help="peak bf16 FLOP/s (instead of --hardware)"
    )
    mg = p.add_mutually_exclusive_group()
    mg.add_argument("--model-config", help="HF config.json of the target")
    mg.add_argument(
        "--model", choices=sorted(cmod.MODEL_PRESETS), default=None, help=f"{role} preset ({defaults.model})"
    )
    mg.add_argument("--params", type=schema_type("model.params"), help="target parameter count (dense)")
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=None,
        help=f"{'target weights' if role == 'target' else 'weight dtype'} ({defaults.dtype})",
    )
    p.add_argument(
        "--tp",
        type=schema_type("tensor_parallel"),
        default=None,
        help=f"tensor parallel size ({defaults.tensor_parallel})",
    )
    p.add_argument(
        "--context",
        type=schema_type("model.context_tokens"),
        default=defaults.context_tokens,
        help=f"context tokens per request ({defaults.context_tokens})",
    )
    p.add_argument(
        "--engine",
        choices=cmod.ENGINE_NAMES,
        default=None,
        help=f"serving engine whose fixed costs of speculation to charge ({defaults.engine}: "
        f"{cmod.prior_for(defaults.engine).engine}; generic: the constants the sidecar uses without engine:)",
    )
    p.add_argument("--engine-version", default=None, help="engine version (vLLM below 0.8: the V0 engine)")
    return p


def load_json(path: str, flag: str = "--model-config") -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        usage_error(f"{flag} {path}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        usage_error(f"{flag} {path}: not JSON ({exc})")
    if not isinstance(data, dict):
        usage_error(f"{flag} {path}: expected a JSON object")
    return data


def _nothing_given(args: argparse.Namespace) -> bool:
    """Neither hardware nor model given: the sidecar's ``config_is_default`` for the flags."""
    return all(
        getattr(args, name, None) is None
        for name in ("hardware", "bandwidth", "flops", "model", "model_config", "params")
    )


def target_basis(args: argparse.Namespace, defaults: ModelDefaults, cm: cmod.CostModel) -> TargetBasis:
    """What ``cost_model_from_flags`` priced, with the settings the flags left to ``defaults``."""
    given = {
        "hardware": any(getattr(args, n, None) is not None for n in ("hardware", "bandwidth", "flops")),
        "model": any(getattr(args, n, None) is not None for n in ("model", "model_config", "params")),
        "dtype": getattr(args, "dtype", None) is not None,
        "tensor_parallel": getattr(args, "tp", None) is not None,
        "engine_prior": getattr(args, "engine", None) is not None,
    }
    engine = getattr(args, "engine", None) or defaults.engine
    return TargetBasis(
        hardware=cm.hardware.name,
        model=cm.model.name,
        dtype=cm.dtype,
        tensor_parallel=cm.tensor_parallel,
        context_tokens=int(cm.context_tokens),
        engine_prior=cmod.prior_for(engine, getattr(args, "engine_version", None)).engine,
        assumed=tuple(name for name, stated in given.items() if not stated),
        setup_assumed=cm.setup_assumed,
    )


def cost_model_from_flags(
    args: argparse.Namespace,
    defaults: ModelDefaults,
    *,
    draft_method: str | None = None,
    draft_cost_per_token: float | None = None,
    draft_k: int = cmod.DEFAULT_DRAFT_K,
    profile: cmod.StepTimeCurve | None = None,
) -> cmod.CostModel:
    """The CostModel of the ``target_options`` flags; a bad value exits with one error line. What the
    flags leave out is ``defaults`` (the sidecar's target: TP 1, bf16 unless given, whatever model
    is named) and, as the sidecar does, an interval widened for an assumed setup when neither
    hardware nor model is given."""
    hardware, bandwidth, flops = args.hardware, args.bandwidth, args.flops
    if hardware is None and bandwidth is None and flops is None:
        hardware = defaults.hardware
    if hardware is None and (bandwidth is None or flops is None):
        usage_error("give --hardware, or both --bandwidth and --flops")
    model_config = load_json(args.model_config) if args.model_config else None
    model = args.model
    if model_config is None and model is None and args.params is None:
        model = defaults.model
    try:
        return cmod.build_cost_model(
            hardware=hardware,
            bandwidth_bytes_per_second=bandwidth,
            flops=flops,
            tensor_parallel=args.tp if args.tp is not None else defaults.tensor_parallel,
            model=model if model_config is None else None,
            model_config=model_config,
            model_params=args.params,
            dtype=args.dtype or defaults.dtype,
            context_tokens=args.context,
            draft_method=draft_method or "auto",
            draft_cost_per_token=draft_cost_per_token,
            draft_k=draft_k,
            profile=profile,
            engine=getattr(args, "engine", None) or defaults.engine,
            engine_version=getattr(args, "engine_version", None),
            setup_assumed=profile is None and _nothing_given(args),
        )
    except ValueError as exc:
        usage_error(str(exc))


def with_draft_k(cm: cmod.CostModel, k: int) -> cmod.CostModel:
    """The same model with the per-proposal fixed draft cost spread over ``k`` (the row's K), so a
    row's numbers do not depend on the other K values asked for on the same command line."""
    k = max(int(k), 1)
    if cm.draft.reference_k == k:
        return cm
    draft = replace(cm.draft, reference_k=k)
    if draft.method == "medusa":  # one head per drafted position
        draft = replace(draft, head_params=cmod.draft_head_params(cm.model, "medusa", k))
    return replace(cm, draft=draft)


def rounded(x: float | None, nd: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), nd)


def emit_json(obj: object, out: IO[str]) -> None:
    out.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _flat(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One CSV row: nested mappings as dotted columns, lists joined with ';'."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = ";".join("" if v is None else str(v) for v in value)
        else:
            out[name] = "" if value is None else value
    return out


def emit_csv(rows: Sequence[Mapping[str, Any]], out: IO[str]) -> None:
    """The rows of a command's table as CSV, one header line (the union of the rows' columns)."""
    flat = [_flat(row) for row in rows]
    columns: list[str] = []
    for row in flat:
        columns += [c for c in row if c not in columns]
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)


#: --format of every lesson command that prints a table.
FORMATS = ("table", "json", "csv")


def describe(cm: cmod.CostModel, basis: TargetBasis | None = None) -> dict[str, Any]:
    """The inputs a report was computed with (printed in every report's header); with ``basis``,
    also the engine prior and what the flags left to the defaults."""
    own = {} if basis is None else {"engine_prior": basis.engine_prior, "assumed": list(basis.assumed)}
    return {
        "hardware": cm.hardware.name,
        "model": cm.model.name,
        "dtype": cm.dtype,
        "tensor_parallel": cm.tensor_parallel,
        "context_tokens_per_request": int(cm.context_tokens),
        "draft_method": cm.draft.method,
        "draft_cost_per_token": rounded(cm.draft_cost_per_token()),
        "mbu": cm.mbu,
        "mfu": cm.mfu,
        "overhead_seconds": cm.overhead_seconds,
        "spec_step_fixed_ms": rounded(cm.verify_overhead_seconds * 1e3),
        "spec_request_fixed_ms": rounded(cm.verify_seconds_per_request * 1e3),
        **own,
    }
