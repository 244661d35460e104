"""Advice in each engine's own terms: the verdict's recommendation as the flags or config that
engine reads.

The verdict is engine-neutral: keep, shorten (a K at the live batch, and a K per batch band where
the cost model wrote a schedule) or disable. Each engine spells that differently, and only some can
change K with the batch:

- vLLM: ``--speculative-config`` JSON, with its ``num_speculative_tokens_per_batch_size`` schedule
  (engines/vllm_schedule.py writes it; the verdict already holds it).
- SGLang: ``--speculative-num-steps`` K, ``--speculative-eagle-topk 1``,
  ``--speculative-num-draft-tokens`` K + 1 (a chain of K drafted tokens); no batch schedule.
- TensorRT-LLM: the ``speculative_config`` section of the ``trtllm-serve --config``
  (``--extra_llm_api_options``) YAML: ``max_draft_len``, and ``draft_len_schedule`` whose keys are
  the upper batch bounds of the bands (above the last key it drafts nothing).
- llama.cpp server: ``--spec-draft-n-max`` K (``--draft-max`` was removed); disable = no
  ``--spec-type`` and no draft model.
- LMDeploy: ``--speculative-num-draft-tokens`` K; disable = no ``--speculative-algorithm``.

Where the engine chooses K per step itself (vLLM's adaptive verification, SGLang's
``--speculative-adaptive``), shortening K is moot: the verdict gives keep or disable only
(``adapts_draft_length``). Pure functions; the exports call ``advise``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.engines.vllm_schedule import ADAPTIVE_VERIFICATION_KEY, SCHEDULE_KEY, SGLANG_ADAPTIVE_KEY

#: The option of each engine that makes it choose K per step (a stated config's key, in that
#: engine's own terms: vLLM's --speculative-config key, SGLang's server argument).
ADAPTIVE_OPTIONS: Mapping[str, str] = {
    "vllm": ADAPTIVE_VERIFICATION_KEY,
    "sglang": SGLANG_ADAPTIVE_KEY,
}
ADAPTIVE_NOTE = (
    "The engine chooses K per step ({option} is on), so shortening K is moot: specwatch advises keep or disable only."
)
NO_SCHEDULE_NOTE = (
    "{engine} has no batch-size schedule of K: this is the K for the live batch; re-check it when the load changes."
)
TRTLLM_SCHEDULE_END_NOTE = (
    "TensorRT-LLM drafts nothing above the last draft_len_schedule key ({last}): raise it if the "
    "server runs larger batches."
)
TRTLLM_NO_SCHEDULE_NOTE = (
    "TensorRT-LLM's draft_len_schedule cannot hold this schedule (its first band must have the "
    "largest K): this is the K for the live batch."
)
SGLANG_CHAIN_NOTE = "For EAGLE-family drafting as a chain (topk 1): --speculative-num-draft-tokens is K + 1 there."

Band = tuple[int, int, int]  # (batch_low, batch_high, K), inclusive

#: SGLang's --speculative-adaptive step bands by batch size: [1, 64), [64, 128), [128, inf).
SGLANG_ADAPTIVE_BANDS: tuple[tuple[int, int | None], ...] = ((1, 63), (64, 127), (128, None))
#: A representative batch of each SGLang band for its candidate K (the open band: twice its start).
SGLANG_BAND_BATCHES = (32.0, 96.0, 256.0)


@dataclass(frozen=True)
class ControllerTerms:
    """What the advice in a controller's terms needs beyond the verdict, priced by the verdict
    (engines cannot price): the live batch, what a K=0 band costs there, the acceptance against
    its break-even at the live batch and at the ends of the batches seen, what the engine's own
    controller delivers, and the best K at each SGLang adaptive band."""

    batch: float
    zero_k_tax: float  # a K=0 band's slowdown against no speculation at the live batch (fraction)
    acceptance_rate: float | None = None
    breakeven: float | None = None  # at the live batch and K
    breakeven_range: tuple[float, float] | None = None  # over the batches seen (lowest, highest)
    delivered_gain: float | None = None  # the engine's controller's gain over no speculation
    best_fixed_k: int | None = None
    band_ks: tuple[int, ...] = ()  # best K at SGLANG_BAND_BATCHES
    #: The stated config's own controller (draft.config): its adaptive option, or "" (none stated),
    #: and whether it states a batch schedule.
    adaptive_option: str = ""
    schedule_stated: bool = False


def vllm_controller_notes(
    terms: ControllerTerms, current: Mapping[str, object] | None, action: str, *, scheduled: bool
) -> tuple[str, ...]:
    """vLLM: keep adaptive verification where it pays; where a schedule is stated or advised, its
    bands as vLLM keys them, with the K=0 band's tax at the live load."""
    notes: list[str] = []
    adaptive = adapts_draft_length(current, "vllm") or terms.adaptive_option == ADAPTIVE_VERIFICATION_KEY
    gain = terms.delivered_gain
    if adaptive and gain is not None and action != "disable":
        notes.append(
            f"Keep {ADAPTIVE_VERIFICATION_KEY}: it delivers {gain:.2f}x over no speculation at batch {terms.batch:.0f}."
        )
    elif adaptive and action == "disable" and terms.best_fixed_k:
        notes.append(
            f"{ADAPTIVE_VERIFICATION_KEY} loses here; a fixed num_speculative_tokens={terms.best_fixed_k} is the "
            f"cost model's best at batch {terms.batch:.0f}, if it pays more than no speculation."
        )
    if scheduled:
        notes.append(
            f"{SCHEDULE_KEY} bands are keyed on the scheduled batch (prefills included); a K=0 band still costs "
            f"{100 * terms.zero_k_tax:.1f} % over no speculation at batch {terms.batch:.0f}: where the route lives "
            "in one, remove --speculative-config instead."
        )
    return tuple(notes)


def sglang_band_notes(terms: ControllerTerms) -> tuple[str, ...]:
    """SGLang: the --speculative-adaptive band candidates (the best K at each band)."""
    if len(terms.band_ks) != len(SGLANG_ADAPTIVE_BANDS):
        return ()
    parts = []
    for (low, high), k in zip(SGLANG_ADAPTIVE_BANDS, terms.band_ks, strict=True):
        where = f"[{low}, {high + 1})" if high is not None else f"[{low}, inf)"
        parts.append(f"{where}: K={k}" + (" (no speculation pays)" if k == 0 else ""))
    return (
        "--speculative-adaptive band candidates (--speculative-num-steps per batch band, the cost model's best K "
        "at the acceptance measured): " + ", ".join(parts) + ".",
    )


def trtllm_gate_notes(terms: ControllerTerms) -> tuple[str, ...]:
    """TensorRT-LLM: an acceptance_rate_threshold at the break-even of the live batch, or none when
    the batches seen move the break-even across the acceptance (the gate is one-way and blind to
    the batch: it would switch off speculation that pays at the other end)."""
    if terms.breakeven is None:
        return ()
    key = "acceptance_rate_threshold"
    if terms.breakeven_range is not None and terms.acceptance_rate is not None:
        low, high = terms.breakeven_range
        if min(low, high) < terms.acceptance_rate < max(low, high):
            return (
                f"Set no {key}: the break-even moves from {min(low, high):.2f} to {max(low, high):.2f} across the "
                f"batches seen, across the acceptance rate {terms.acceptance_rate:.2f}; the gate would switch "
                "speculation off for good where it still pays.",
            )
    return (
        f"{key}: {terms.breakeven:.2f} (the break-even at batch {terms.batch:.0f}); below it speculation loses "
        "there. The gate is one-way until a restart.",
    )


def llamacpp_request_notes(k: int) -> tuple[str, ...]:
    """llama.cpp: the per-request draft length a client or gateway can set now, where the build reads
    it: recent llama-server builds compile their per-request speculative fields out and ignore them
    without an error (tests/system/realllamacpp), so the next window must confirm it."""
    return (
        f'Per request, without a restart: "speculative.n_max": {k} in the request body, on llama.cpp builds that '
        "read per-request speculative fields (recent ones ignore them silently; the flag is the server's default "
        "and always applies). specwatch's next window shows the K the server drafts.",
    )


class Assessed(Protocol):
    """What the advice reads of a verdict's assessment (verdict/decide.Assessment)."""

    @property
    def candidate(self) -> str: ...
    @property
    def action(self) -> str | None: ...
    @property
    def recommended_draft_length(self) -> int | None: ...
    @property
    def recommended_config(self) -> dict[str, object] | None: ...
    @property
    def config_changes(self) -> Mapping[str, object] | None: ...


@dataclass(frozen=True)
class Recommendation:
    """The verdict's advice in no engine's terms."""

    action: str  # keep, shorten or disable
    k: int  # K at the live batch; 0 = disable
    k_max: int = 0  # the largest K of the bands (= k without a schedule)
    bands: tuple[Band, ...] = ()  # the K per batch band, from batch 1; empty: one K at every batch


def _shell_line(flags: tuple[str, ...]) -> str:
    """Flags quoted as one shell line."""
    import shlex  # only where an engine's flags are advised

    return shlex.join(flags)


def _yaml(value: object, **options: Any) -> str:
    """yaml.safe_dump of an engine's config section."""
    import yaml  # only where an engine's YAML config is advised

    text: str = yaml.safe_dump(value, **options)
    return text


@dataclass(frozen=True)
class EngineAdvice:
    """A recommendation in one engine's terms. ``flags``: arguments to add to the server's command
    line, replacing the same flags; ``remove``: flags to drop with their values; ``config``: a
    structured config where the engine reads one (TensorRT-LLM's YAML); ``merge``: keys to merge
    into the config the server runs (vLLM without the drafter's path)."""

    engine: str
    action: str  # keep, shorten or disable
    flags: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    config: Mapping[str, object] | None = None
    merge: Mapping[str, object] | None = None
    notes: tuple[str, ...] = ()
    #: Fields a client or gateway can set in each request's body now, without a restart (llama.cpp).
    request: Mapping[str, object] | None = None

    @property
    def command(self) -> str | None:
        """The advice as one line a user can act on (None: nothing to change)."""
        if self.flags:
            return _shell_line(self.flags)
        if self.config is not None:
            return _yaml(dict(self.config), sort_keys=False, default_flow_style=False).strip()
        family = "vllm" if self.engine in VLLM_ENGINES else self.engine
        if self.merge is not None:
            return MERGE_PREFIX.get(family, "merge: ") + json.dumps(self.merge, separators=(",", ":"))
        if self.remove:
            return "remove " + " ".join(self.remove) + DISABLE_SUFFIX.get(family, "")
        return None

    @property
    def label(self) -> str:
        """The advice on one line for the ``config`` label of specwatch_recommended_config_info,
        which the alerts quote: vLLM's config or keys to merge as sorted JSON (the alert wraps it
        in --speculative-config), empty for its keep and disable; another engine's flags, its YAML
        section on one line (``speculative_config: {...}``), or what to remove, as they are."""
        if self.engine in VLLM_ENGINES:
            keys = self.config if self.config is not None else self.merge
            return "" if keys is None else json.dumps(keys, separators=(",", ":"), sort_keys=True)
        if self.config is not None:
            return "; ".join(
                f"{key}: " + _yaml(value, default_flow_style=True, width=1 << 16).strip()
                for key, value in self.config.items()
            )
        if self.flags:
            return _shell_line(self.flags)
        return (self.command or "") if self.action == "disable" else ""

    @property
    def export_action(self) -> str:
        """The ``action`` label (verdict.decide.ACTIONS): no_change, apply (the flags or config are
        complete), merge (keys to merge into yours) or remove_speculative_config (turn it off)."""
        if self.action == "shorten":
            return "merge" if self.merge is not None else "apply"
        return "remove_speculative_config" if self.action == "disable" else "no_change"


MERGE_PREFIX: Mapping[str, str] = {"vllm": "merge into your --speculative-config: "}
DISABLE_SUFFIX: Mapping[str, str] = {
    "vllm": " (serve without speculative decoding)",
    "trtllm": " from the --config YAML (serve without speculative decoding)",
    "llamacpp": " (serve without the draft model)",
}


def adapts_draft_length(current: Mapping[str, object] | None, engine: str | None = None) -> bool:
    """Whether the stated config makes the engine choose K per step. ``engine`` None: any engine's
    option (their names differ, so a vLLM config cannot read as SGLang's)."""
    if not current:
        return False
    options = ADAPTIVE_OPTIONS.values() if engine is None else (ADAPTIVE_OPTIONS.get(engine),)
    return any(option is not None and current.get(option) is True for option in options)


def adaptive_note(current: Mapping[str, object] | None) -> str:
    option = next((o for o in ADAPTIVE_OPTIONS.values() if current and current.get(o) is True), "")
    return ADAPTIVE_NOTE.format(option=option)


def recommendation_of(assessed: Assessed | None) -> Recommendation | None:
    """The neutral recommendation of an assessment; None without a verdict to act on."""
    if assessed is None or assessed.action not in ("no_change", "apply", "merge", "remove_speculative_config"):
        return None  # no verdict, or one that asks for something else than a config (a measurement)
    if assessed.action == "remove_speculative_config":
        return Recommendation("disable", 0)
    k = int(assessed.recommended_draft_length or 0)
    if assessed.action == "no_change":
        return Recommendation("keep", k, k)
    changes = assessed.config_changes or {}
    raw = changes.get(SCHEDULE_KEY)
    bands = tuple((int(b[0]), int(b[1]), int(b[2])) for b in raw) if isinstance(raw, list) else ()
    k_max = changes.get("num_speculative_tokens")
    return Recommendation("shorten", k, int(k_max) if isinstance(k_max, int) else k, bands)


def _vllm(assessed: Assessed, rec: Recommendation) -> EngineAdvice:
    """vLLM's advice is the verdict's own config (written by engines/vllm_schedule.py)."""
    if rec.action == "disable":
        return EngineAdvice("vllm", "disable", remove=("--speculative-config",))
    if rec.action == "keep":
        return EngineAdvice("vllm", "keep")
    if assessed.recommended_config is not None:
        text = json.dumps(assessed.recommended_config, separators=(",", ":"))
        return EngineAdvice("vllm", "shorten", ("--speculative-config", text), config=assessed.recommended_config)
    return EngineAdvice("vllm", "shorten", merge=dict(assessed.config_changes or {}))


def _fixed_k_notes(engine: str, rec: Recommendation) -> tuple[str, ...]:
    return (NO_SCHEDULE_NOTE.format(engine=engine),) if len({k for _, _, k in rec.bands}) > 1 else ()


#: Flags of the lists below that take no value.
SWITCHES = frozenset({"--speculative-adaptive"})
SGLANG_FLAGS = (
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-adaptive",
    "--speculative-adaptive-config",
)


def _sglang(rec: Recommendation, current: Mapping[str, object] | None) -> EngineAdvice:
    if rec.action == "disable":
        return EngineAdvice("sglang", "disable", remove=SGLANG_FLAGS)
    if rec.action == "keep":
        return EngineAdvice("sglang", "keep")
    k = rec.k
    flags = (
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(k + 1),
    )
    return EngineAdvice("sglang", "shorten", flags=flags, notes=(*_fixed_k_notes("SGLang", rec), SGLANG_CHAIN_NOTE))


def trtllm_schedule(bands: Sequence[Band]) -> dict[int, int] | None:
    """TensorRT-LLM's draft_len_schedule for batch bands, or None when it cannot hold them.

    Its keys are each band's upper batch bound (sorted, the first maps to max_draft_len), and above
    the last key it drafts nothing, so trailing K = 0 bands are left out and bands of equal K are
    joined. None: one K everywhere (no schedule needed), or a first band below the largest K (the
    engine requires the smallest key to map to max_draft_len)."""
    joined: list[Band] = []
    for low, high, k in sorted(bands):
        if joined and joined[-1][2] == k:
            joined[-1] = (joined[-1][0], high, k)
        else:
            joined.append((low, high, k))
    ends_off = bool(joined) and joined[-1][2] == 0
    while joined and joined[-1][2] == 0:
        joined.pop()
    if not joined or (len(joined) == 1 and not ends_off) or joined[0][2] != max(k for _, _, k in joined):
        return None
    return {high: k for _, high, k in joined}


def _trtllm(rec: Recommendation, current: Mapping[str, object] | None) -> EngineAdvice:
    if rec.action == "disable":
        return EngineAdvice("trtllm", "disable", remove=("speculative_config",))
    if rec.action == "keep":
        return EngineAdvice("trtllm", "keep")
    section: dict[str, object] = {key: value for key, value in (current or {}).items() if key != "draft_len_schedule"}
    schedule = trtllm_schedule(rec.bands)
    notes: tuple[str, ...] = ()
    if schedule is not None:
        section.pop("max_concurrency", None)  # the engine refuses it beside a schedule
        section["max_draft_len"] = rec.k_max
        section["draft_len_schedule"] = schedule
        notes = (TRTLLM_SCHEDULE_END_NOTE.format(last=max(schedule)),)
    else:
        section["max_draft_len"] = rec.k
        notes = (TRTLLM_NO_SCHEDULE_NOTE,) if len({k for _, _, k in rec.bands}) > 1 else ()
    return EngineAdvice("trtllm", "shorten", config={"speculative_config": section}, notes=notes)


LLAMACPP_FLAGS = (
    "--spec-type",
    "--spec-draft-model",
    "-md",
    "--model-draft",
    "--spec-draft-n-max",
    "--spec-draft-n-min",
    "--spec-draft-p-min",
    "--draft-p-min",
)


def _llamacpp(rec: Recommendation, current: Mapping[str, object] | None) -> EngineAdvice:
    if rec.action == "disable":
        return EngineAdvice("llamacpp", "disable", remove=LLAMACPP_FLAGS)
    if rec.action == "keep":
        return EngineAdvice("llamacpp", "keep")
    flags: tuple[str, ...] = ("--spec-draft-n-max", str(rec.k))
    n_min = (current or {}).get("spec_draft_n_min")
    if isinstance(n_min, int) and n_min > rec.k:
        flags += ("--spec-draft-n-min", str(rec.k))  # a minimum above the maximum would refuse to draft
    return EngineAdvice("llamacpp", "shorten", flags=flags, notes=_fixed_k_notes("llama.cpp", rec))


LMDEPLOY_FLAGS = ("--speculative-algorithm", "--speculative-draft-model", "--speculative-num-draft-tokens")


def _lmdeploy(rec: Recommendation, current: Mapping[str, object] | None) -> EngineAdvice:
    if rec.action == "disable":
        return EngineAdvice("lmdeploy", "disable", remove=LMDEPLOY_FLAGS)
    if rec.action == "keep":
        return EngineAdvice("lmdeploy", "keep")
    flags = ("--speculative-num-draft-tokens", str(rec.k))
    return EngineAdvice("lmdeploy", "shorten", flags=flags, notes=_fixed_k_notes("LMDeploy", rec))


RENDERERS = {"sglang": _sglang, "trtllm": _trtllm, "llamacpp": _llamacpp, "lmdeploy": _lmdeploy}
#: Engines that read vLLM's --speculative-config (Ray Serve LLM passes it to its vLLM engines).
VLLM_ENGINES = frozenset({"vllm", "ray-vllm"})
ADVISED_ENGINES = (*sorted(VLLM_ENGINES), *RENDERERS)


def advise(
    assessed: Assessed | None, engine: str = DEFAULT_ENGINE, current: Mapping[str, object] | None = None
) -> EngineAdvice | None:
    """The assessment's advice in ``engine``'s terms; None without a verdict to act on, or for an
    engine specwatch cannot write advice for. ``current``: the speculative config the server runs
    with, in that engine's own keys (vLLM: --speculative-config; SGLang, LMDeploy: server argument
    names; TensorRT-LLM: its speculative_config section; llama.cpp: ``spec_draft_n_min`` ...)."""
    rec = recommendation_of(assessed)
    if rec is None or assessed is None:
        return None
    if rec.action == "shorten" and adapts_draft_length(current, engine):
        advice = EngineAdvice(engine, "keep", notes=(adaptive_note(current),))
    elif engine in VLLM_ENGINES:
        advice = replace(_vllm(assessed, rec), engine=engine)
    else:
        render = RENDERERS.get(engine)
        if render is None:
            return None
        advice = render(rec, current)
    # The verdict's Assessment carries them (verdict/controller_gain.controller_terms); a bare
    # recommendation has none.
    terms = getattr(assessed, "controller_terms", None)
    return in_controller_terms(advice, rec, terms, current) if isinstance(terms, ControllerTerms) else advice


def in_controller_terms(
    advice: EngineAdvice, rec: Recommendation, terms: ControllerTerms, current: Mapping[str, object] | None
) -> EngineAdvice:
    """The advice with what the engine's own controller of K can do: vLLM's adaptive verification
    or schedule bands, SGLang's adaptive bands, TensorRT-LLM's gate threshold, llama.cpp's
    per-request draft length."""
    engine = advice.engine
    if engine in VLLM_ENGINES:
        scheduled = bool(rec.bands) or terms.schedule_stated or SCHEDULE_KEY in (current or {})
        notes = vllm_controller_notes(terms, current, advice.action, scheduled=scheduled)
        return replace(advice, notes=(*advice.notes, *notes))
    if engine == "sglang":
        return replace(advice, notes=(*advice.notes, *sglang_band_notes(terms)))
    if engine == "trtllm" and advice.action != "disable":
        return replace(advice, notes=(*advice.notes, *trtllm_gate_notes(terms)))
    if engine == "llamacpp" and advice.action == "shorten" and rec.k > 0:
        return replace(
            advice, request={"speculative.n_max": rec.k}, notes=(*advice.notes, *llamacpp_request_notes(rec.k))
        )
    return advice


def apply_to_command(argv: Sequence[str], advice: EngineAdvice) -> list[str]:
    """A server command line with the advice applied: its ``remove`` flags dropped, its ``flags``
    replacing the same flags or appended. Every flag it names takes one value (``--flag value`` or
    ``--flag=value``) but the switches (SWITCHES)."""
    names = set(advice.remove) | {f for f in advice.flags if f.startswith("-")}
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            skip = "=" not in arg and name not in SWITCHES
            continue
        out.append(arg)
    return out + list(advice.flags)
