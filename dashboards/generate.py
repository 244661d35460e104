#!/usr/bin/env python3
"""Generate dashboards/specwatch.json, the specwatch Grafana dashboard (Grafana 11, classic JSON model).

Dashboard as code in plain Python dicts: every panel, query and threshold is spelled out here, and
the committed JSON is exactly what this script prints. Regenerate after editing:

    python dashboards/generate.py            # rewrite dashboards/specwatch.json
    python dashboards/generate.py --check    # exit 1 if the committed file differs (CI)

The Helm chart packages the committed JSON file (one ConfigMap labelled for the Grafana sidecar).

Query conventions (the metric contract, docs/architecture.md):
- every selector of a derived gauge pins `window="$window"` (a sum or average across windows means nothing);
- every selector filters on `cluster`, `namespace`, `pod` and (for route series) `target` and `route` with
  `=~`, so "All" (`.*`) also matches series that carry no such label (a Prometheus outside Kubernetes, or
  one cluster without a `cluster` external label);
- legends name route, pod and target: unique in sidecar mode (one pod per target) and in standalone
  mode (one exporter pod, many targets);
- counters go through `rate(...[$__rate_interval])`;
- only metrics the sidecar exports, or that `rules/*.yaml` records, are named (tests/deploy/test_dashboard.py
  proves it); the alert annotation reads Prometheus's `ALERTS` series of the alerts in `rules/`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).with_name("specwatch.json")
RUNBOOK = "https://github.com/specwatch/specwatch/blob/main/docs/runbook.md"
# Panels that show what an alert fires on link to its runbook section.
PANEL_RUNBOOKS = {
    "Acceptance margin α − α*": ("SpecDecodeBelowBreakeven", "SpecDecodeFleetBelowBreakeven"),
    # Under an engine's own K controller the loss probability is the delivered gain's (controller_gain).
    "P(speculation loses) ($window window)": ("SpecDecodeProbablyLosing", "SpecDecodeControllerLosing"),
    "Acceptance rate α vs break-even α* ($window window)": (
        "SpecDecodeBelowBreakeven",
        "SpecwatchReplicaBelowBreakeven",
    ),
    "Fleet acceptance rate α per route (all pods, 5m)": ("SpecDecodeFleetBelowBreakeven",),
    "Recommended K": ("SpecDecodeShorterDraftRecommended",),
    "Mean acceptance length τ and draft length K": (
        "SpecDecodeConfigMismatch",
        "SpecDecodeSpeculationStopped",
        "SpecwatchReplicaDraftLengthDiffers",
    ),
    "ITL per step: P50 and P99 vs spec-off baseline": ("SpecDecodeITLP99Regression",),
    # The alert's measured gain is this per-token ITL before a change over after it.
    "ITL per token (mean)": ("SpecDecodeAppliedAdviceSlowedDecode",),
    "Target up": ("SpecDecodeTargetDown",),
    "Since last good poll": ("SpecDecodeTargetDown",),
    "Sidecar and routes": ("SpecDecodeMetricsMissing", "SpecwatchConfigReloadFailed"),
    "Query source up": ("SpecwatchPrometheusDown", "SpecwatchFleetShardDown"),
    "Since last good query poll": ("SpecwatchPrometheusDown",),
    "Query errors by reason": ("SpecwatchPrometheusQueryErrors",),
    "Stale replicas": ("SpecwatchStaleReplicas", "SpecwatchReplicaStale"),
}

DS = {"type": "prometheus", "uid": "${datasource}"}

# Label filters shared by every query.
POD = 'cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"'
TARGET = POD + ', target=~"$target"'
ROUTE = TARGET + ', route=~"$route"'
WIN = ROUTE + ', window="$window"'

# Verdict encoding for the stat panel (value -> text, colour). The sidecar exports one
# `specwatch_verdict{verdict=...}` series per verdict, 1 for the current one and 0 for the others.
VERDICTS = [
    ("keep", "keep", "green"),
    ("shorten", "shorten K", "yellow"),
    ("disable", "disable", "red"),
    ("insufficient_data", "insufficient data", "blue"),
    ("spec_off", "spec off", "text"),
    ("undecided", "undecided: measure", "purple"),
]

# SpecDecodeProbablyLosing's threshold on specwatch_loss_probability (rules/specwatch-alerts.yaml),
# drawn as a line on the loss-probability panel.
LOSS_PROBABILITY_ALERT = 0.8

# The default decision guard (`decision.min_drafts`), drawn as a line on the drafts panel.
DEFAULT_MIN_DRAFTS = 500

ITL_NOTE = (
    "vLLM observes one inter-token latency per request per engine step. With speculative decoding one "
    "output can carry several tokens (the mean acceptance length τ on average), so these are per-step "
    "latencies, not per-token ones: compare against the acceptance length, and read the per-token mean "
    "on the panel to the right. Watch P99, not P50: a rejected draft costs an extra pass, and at full "
    "batch those passes serialise."
)


# --------------------------------------------------------------------------------------------------
# Small builders (plain dicts that follow the Grafana 11 classic model and the foundation-SDK schemas)
# --------------------------------------------------------------------------------------------------


def target(ref: str, expr: str, legend: str, *, instant: bool = False) -> dict:
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    return t


# The legend of a per-route series: unique in sidecar and in standalone mode.
PER_ROUTE = "{{route}} · {{pod}} · {{target}}"


def per_route(ref: str, metric: str, prefix: str = "", *, selector: str = WIN, instant: bool = False) -> dict:
    """One route-window gauge per route and pod, its legend led by `prefix`."""
    return target(ref, f"{metric}{{{selector}}}", prefix + PER_ROUTE, instant=instant)


def route_rate(counter: str) -> str:
    """The per-second rate of a mirrored counter, per route and pod."""
    return f"sum by (cluster, namespace, pod, target, route) (rate({counter}{{{ROUTE}}}[$__rate_interval]))"


def fleet_rule(ref: str, record: str, legend: str) -> dict:
    """A series recorded by rules/specwatch-recording.yaml, per route over its pods."""
    return target(ref, f"{record}{{{FLEET}}}", legend)


def link(title: str, url: str, *, tooltip: str = "") -> dict:
    """An external link (dashboard and panel links share Grafana's DashboardLink model)."""
    return {
        "title": title,
        "type": "link",
        "url": url,
        "icon": "doc",
        "tooltip": tooltip or title,
        "tags": [],
        "asDropdown": False,
        "targetBlank": True,
        "includeVars": False,
        "keepTime": False,
    }


def thresholds(*steps: tuple[float | None, str]) -> dict:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def value_mappings(pairs: list[tuple[str, str, str]]) -> list[dict]:
    return [
        {
            "type": "value",
            "options": {v: {"text": text, "color": color, "index": i} for i, (v, text, color) in enumerate(pairs)},
        }
    ]


def fixed(color: str) -> list[dict]:
    """Override properties: a fixed colour."""
    return [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]


def dashed(color: str) -> list[dict]:
    """Override properties: a dashed line in a fixed colour (reference lines: break-even, limits)."""
    return [*fixed(color), {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]


def by_prefix(prefix: str, props: list[dict]) -> dict:
    """Override for the series whose legend starts with `prefix`.

    `byRegexpOrNames` takes an object option, which the strict dashboard schema requires (the string
    options of `byFrameRefID` / `byRegexp` do not validate); Grafana matches the regexp on display names.
    """
    pattern = "/^" + re.sub(r"([\\^$.*+?()\[\]{}|/])", r"\\\1", prefix) + "/"
    return {"matcher": {"id": "byRegexpOrNames", "options": {"pattern": pattern, "names": []}}, "properties": props}


def timeseries(
    title: str,
    description: str,
    targets: list[dict],
    *,
    unit: str,
    min_: float | None = None,
    max_: float | None = None,
    overrides: list[dict] | None = None,
    decimals: int | None = None,
    thresh: dict | None = None,
    thresholds_style: str = "off",
) -> dict:
    defaults: dict = {
        "custom": {
            "drawStyle": "line",
            "lineInterpolation": "linear",
            "lineWidth": 2,
            "fillOpacity": 0,
            "gradientMode": "none",
            "showPoints": "never",
            "pointSize": 4,
            "spanNulls": False,
            "axisPlacement": "auto",
            "axisBorderShow": False,
            "axisCenteredZero": False,
            "axisColorMode": "text",
            "axisLabel": "",
            "scaleDistribution": {"type": "linear"},
            "stacking": {"mode": "none", "group": "A"},
            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
            "thresholdsStyle": {"mode": thresholds_style},
        },
        "color": {"mode": "palette-classic"},
        "unit": unit,
        "mappings": [],
        "thresholds": thresh or thresholds((None, "green")),
    }
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "showLegend": True,
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["lastNotNull", "min", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    description: str,
    targets: list[dict],
    *,
    unit: str = "none",
    thresh: dict | None = None,
    mappings: list[dict] | None = None,
    decimals: int | None = None,
    text_mode: str = "value_and_name",
    color_mode: str = "value",
    graph_mode: str = "none",
    overrides: list[dict] | None = None,
    value_size: int | None = None,
) -> dict:
    defaults: dict = {
        "unit": unit,
        "color": {"mode": "thresholds"},
        "mappings": mappings or [],
        "thresholds": thresh or thresholds((None, "text")),
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    options: dict = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "auto",
        "textMode": text_mode,
        "colorMode": color_mode,
        "graphMode": graph_mode,
        "justifyMode": "auto",
        "wideLayout": True,
        "showPercentChange": False,
        "percentChangeColorMode": "standard",
    }
    if value_size is not None:
        options["text"] = {"valueSize": value_size}
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options,
    }


def share(title: str, description: str, targets: list[dict], **options: object) -> dict:
    """A time series of shares (acceptance rates, token shares): 0 to 100 %."""
    return timeseries(title, description, targets, unit="percentunit", min_=0, max_=1, **options)


def up_stat(title: str, description: str, targets: list[dict]) -> dict:
    """Up (green) or down (red) per series."""
    return stat(
        title,
        description,
        targets,
        mappings=value_mappings([("0", "down", "red"), ("1", "up", "green")]),
        thresh=thresholds((None, "red"), (1, "green")),
        color_mode="background",
    )


def listing(title: str, description: str, targets: list[dict], *, value_size: int) -> dict:
    """A stat that lists its series' names (the value itself is always 1)."""
    return stat(title, description, targets, text_mode="name", color_mode="none", value_size=value_size)


# --------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------


def verdict_row() -> list[tuple[dict, int, int]]:
    verdict_expr = (
        "max by (cluster, namespace, pod, target, route) (\n"
        + "\n  or ".join(
            f'(specwatch_verdict{{{WIN}, verdict="{v}"}} == 1) * {i}' for i, (v, _, _) in enumerate(VERDICTS, 1)
        )
        + "\n)"
    )
    verdict = stat(
        "Verdict",
        "Current verdict per route and pod on the selected window (docs/costmodel.md): keep; shorten K (a shorter "
        "draft pays more); disable (best K' = 0 or expected speedup < 1); insufficient data (fewer drafts "
        "than the guard); spec off (no drafts seen); undecided: measure (the expected speedup's interval "
        "reaches 1, so the data cannot decide: the status JSON's measurement says what would, e.g. a spec-off "
        "canary at the live batch). A new verdict only shows after it has held for `hold` evaluations.",
        [target("A", verdict_expr, PER_ROUTE, instant=True)],
        mappings=value_mappings([(str(i), text, color) for i, (_, text, color) in enumerate(VERDICTS, 1)]),
        color_mode="background",
        text_mode="value_and_name",
    )
    speedup = stat(
        "Expected speedup",
        "Modelled speedup of speculation over plain decoding at the live batch size and the measured "
        "acceptance: tau(K)·T(B)/T_spec(B, K). Below 1× speculation costs more than it saves. Lower and "
        "upper: its interval at decision.confidence (the model's error and alpha's noise); keep needs the "
        "lower bound above 1, disable the upper bound below 1, otherwise the verdict is undecided.",
        [
            per_route("A", "specwatch_expected_speedup", instant=True),
            per_route("B", "specwatch_expected_speedup_lower", "lower · ", instant=True),
            per_route("C", "specwatch_expected_speedup_upper", "upper · ", instant=True),
        ],
        unit="suffix:×",
        decimals=2,
        thresh=thresholds((None, "red"), (1.0, "yellow"), (1.1, "green")),
    )
    loss = share(
        "P(speculation loses) ($window window)",
        "Probability that speculation is slower than plain decoding at the live batch size (true speedup "
        "< 1), per route and pod on the selected window: specwatch_loss_probability, from the same interval "
        "as the expected speedup's lower and upper bounds. At or above the dashed line "
        f"({LOSS_PROBABILITY_ALERT:.0%}) for 15m, SpecDecodeProbablyLosing fires (not when the verdict is "
        "already disable or spec off). Disable needs the whole interval below 1 (about 95 % at the default "
        "decision.confidence), so between the two the verdict stays undecided: the status JSON's measurement "
        "(a spec-off canary at the live batch) confirms it.",
        [per_route("A", "specwatch_loss_probability")],
        decimals=0,
        thresh=thresholds((None, "green"), (LOSS_PROBABILITY_ALERT, "red")),
        thresholds_style="dashed",
    )
    loss["options"]["legend"] = {"showLegend": True, "displayMode": "list", "placement": "bottom", "calcs": []}
    margin = stat(
        "Acceptance margin α − α*",
        "Measured acceptance rate minus the break-even acceptance rate for the live batch size and draft "
        "length, in percentage points. Negative: speculation is below break-even (the "
        "SpecDecodeBelowBreakeven alert). Yellow inside the default decision margin (0.02).",
        [per_route("A", "specwatch_acceptance_margin", instant=True)],
        unit="percentunit",
        decimals=1,
        thresh=thresholds((None, "red"), (0.0, "yellow"), (0.02, "green")),
    )
    alpha_vs = stat(
        "α vs break-even α*",
        "The two numbers behind the margin: α = Δaccepted / Δdraft tokens on the window, α* = the acceptance "
        "rate at which speculation is exactly break-even at the live batch (rises with batch size). α* is "
        'capped at 100 %: "no α pays?" says whether any acceptance rate pays at the live batch and K '
        "(specwatch_speculation_cannot_pay).",
        [
            per_route("A", "specwatch_acceptance_ratio", "α ", instant=True),
            per_route("B", "specwatch_breakeven_acceptance_ratio", "α* ", instant=True),
            # shifted to 2 (pays) / 3 (cannot pay), outside α's and α*'s [0, 1], so the panel-wide
            # mapping below only ever matches this flag (the strict dashboard schema takes no
            # per-field mappings override)
            target("C", f"specwatch_speculation_cannot_pay{{{WIN}}} + 2", "no α pays? " + PER_ROUTE, instant=True),
        ],
        unit="percentunit",
        decimals=1,
        color_mode="value",
        mappings=value_mappings([("2", "no", "green"), ("3", "yes: at this B and K", "red")]),
        thresh=thresholds((None, "green")),
        overrides=[by_prefix("α* ", fixed("red"))],
    )
    rec_k = stat(
        "Recommended K",
        "Draft length with the best modelled speedup at the live batch (from the per-position acceptance "
        "p_i); 0 means disable speculation. The measured mean draft length K is shown for comparison.",
        [
            per_route("A", "specwatch_recommended_draft_length_tokens", "K' ", instant=True),
            per_route("B", "specwatch_draft_length_tokens", "K now ", instant=True),
        ],
        decimals=1,
        mappings=value_mappings([("0", "0 (disable)", "red")]),
        thresh=thresholds((None, "text")),
    )
    config = listing(
        "Recommended --speculative-config",
        "What to do with vLLM's `--speculative-config` for the verdict, by action: apply = the JSON is a "
        "complete flag to paste; merge = merge these keys (fewer `num_speculative_tokens`, a V1 "
        "`num_speculative_tokens_per_batch_size` schedule) into your own flag, whose drafter model path "
        "specwatch does not know; remove_speculative_config = restart vLLM without the flag; no_change. "
        "Another engine's route shows its own flags or config (docs/engines.md).",
        [
            target(
                "A",
                "max by (cluster, namespace, pod, target, route, action, config) "
                f"(specwatch_recommended_config_info{{{WIN}}})",
                PER_ROUTE + ": {{action}} {{config}}",
                instant=True,
            )
        ],
        value_size=14,
    )
    # the loss probability beside the expected speedup and its interval it is read from
    return [
        (verdict, 5, 6),
        (speedup, 4, 6),
        (loss, 7, 6),
        (margin, 4, 6),
        (alpha_vs, 4, 6),
        (rec_k, 5, 4),
        (config, 19, 4),
    ]


def acceptance_row() -> list[tuple[dict, int, int]]:
    alpha = share(
        "Acceptance rate α vs break-even α* ($window window)",
        "The picture behind SpecDecodeBelowBreakeven: measured α (solid) against the break-even α* for the "
        "live batch size and draft length (dashed red). α* rises as the batch grows, because a bigger decode "
        "batch already amortises the weight reads and verification costs more; once α falls below the red "
        "line, speculation slows the server down. Read it with the batch-size panel in the Load row.",
        [
            per_route("A", "specwatch_acceptance_ratio", "α "),
            per_route("B", "specwatch_breakeven_acceptance_ratio", "break-even α* "),
        ],
        overrides=[by_prefix("break-even α* ", dashed("red"))],
    )
    tau = timeseries(
        "Mean acceptance length τ and draft length K",
        "τ = 1 + Δaccepted / Δdrafts: tokens emitted per speculative step. K = Δdraft tokens / Δdrafts: the "
        "mean draft length actually proposed (n-gram often drafts fewer than configured). Configured K: "
        "what the stated draft.config gives at the live batch (only when draft.config is set); K away "
        "from it is SpecDecodeConfigMismatch (a batch-size schedule ignored or dropped).",
        [
            per_route("A", "specwatch_mean_acceptance_length_tokens", "τ "),
            per_route("B", "specwatch_draft_length_tokens", "K "),
            per_route("C", "specwatch_configured_draft_length_tokens", "configured K "),
        ],
        unit="none",
        min_=0,
        decimals=2,
        overrides=[by_prefix("K ", dashed("purple")), by_prefix("configured K ", dashed("orange"))],
    )
    pos = share(
        "Per-position acceptance p_i",
        "Share of drafts whose position i was accepted (non-increasing in i). Where p_i is small, drafting "
        "position i costs more than it returns: the reason behind a shorter recommended K.",
        [target("A", f"specwatch_position_acceptance_ratio{{{WIN}}}", PER_ROUTE + " pos {{position}}")],
    )
    drafts = timeseries(
        "Drafts in window",
        f"Speculative steps (drafts) inside the window. Verdicts need at least `decision.min_drafts` drafts "
        f"(default {DEFAULT_MIN_DRAFTS}, dashed line); below it the verdict is insufficient data and the "
        f"derived gauges are absent.",
        [per_route("A", "specwatch_window_drafts")],
        unit="short",
        min_=0,
        decimals=0,
        thresh=thresholds((None, "red"), (DEFAULT_MIN_DRAFTS, "green")),
        thresholds_style="dashed",
    )
    tokens = timeseries(
        "Draft tokens/s: accepted and rejected",
        "From the mirrored vLLM counters: draft tokens proposed per second, split into accepted and "
        "rejected (proposed − accepted). Rejected tokens are verification work that produced nothing.",
        [
            target("A", route_rate("specwatch_accepted_tokens_total"), "accepted " + PER_ROUTE),
            target(
                "B",
                route_rate("specwatch_draft_tokens_total") + "\n- " + route_rate("specwatch_accepted_tokens_total"),
                "rejected " + PER_ROUTE,
            ),
        ],
        unit="short",
        min_=0,
        overrides=[by_prefix("rejected ", fixed("orange"))],
    )
    return [(alpha, 12, 9), (tau, 6, 9), (pos, 6, 9), (drafts, 12, 7), (tokens, 12, 7)]


def latency_row() -> list[tuple[dict, int, int]]:
    steps = timeseries(
        "ITL per step: P50 and P99 vs spec-off baseline",
        ITL_NOTE + " The dashed line is the route's configured spec-off P99 baseline "
        "(`routes[].baseline_itl_p99_seconds`), present only where configured; SpecDecodeITLP99Regression "
        "compares P99 against it.",
        [
            per_route("A", "specwatch_itl_p50_seconds", "P50 "),
            per_route("B", "specwatch_itl_p99_seconds", "P99 "),
            per_route("C", "specwatch_baseline_itl_p99_seconds", "spec-off P99 baseline ", selector=ROUTE),
        ],
        unit="s",
        min_=0,
        overrides=[by_prefix("spec-off P99 baseline ", dashed("red"))],
    )
    per_token = timeseries(
        "ITL per token (mean)",
        "Mean latency per generated token on the window: Δ ITL sum / Δ generation tokens. Speculation "
        "lowers it when it pays; compare with the per-step percentiles on the left.",
        [per_route("A", "specwatch_itl_per_token_mean_seconds")],
        unit="s",
        min_=0,
    )
    return [(steps, 12, 8), (per_token, 12, 8)]


def load_row() -> list[tuple[dict, int, int]]:
    batch = timeseries(
        "Live batch size vs largest batch where speculation pays",
        "Live batch B: requests that got decode output per engine step (averaged over the window). The "
        "dashed red line is the largest batch at which the current α still pays; when B climbs above it, "
        "α has fallen below the (rising) break-even — the same moment the Acceptance row shows α crossing α*.",
        [
            per_route("A", "specwatch_batch_size_requests", "batch "),
            per_route("B", "specwatch_max_speculative_batch_size_requests", "max paying batch "),
        ],
        unit="short",
        min_=0,
        decimals=1,
        overrides=[by_prefix("max paying batch ", dashed("red"))],
    )
    gen = timeseries(
        "Generation tokens/s",
        "Output tokens per second (vLLM counts accepted draft and bonus tokens as generated), and the part "
        "that came from accepted drafts.",
        [
            target("A", route_rate("specwatch_generation_tokens_total"), "generated " + PER_ROUTE),
            target("B", route_rate("specwatch_accepted_tokens_total"), "from accepted drafts " + PER_ROUTE),
        ],
        unit="short",
        min_=0,
    )
    return [(batch, 12, 8), (gen, 12, 8)]


# Fleet panels read the recording rules of rules/specwatch-recording.yaml (level namespace_route:
# summed over pods, rates over 5m, ratios of sums, never averages of ratios). They carry only
# `namespace`, `route` (and `position`), so the pod and window variables do not apply.
FLEET = 'cluster=~"$cluster", namespace=~"$namespace", route=~"$route"'
FLEET_NOTE = (
    "Fleet view from specwatch's recording rules: counters rated over 5m, summed over every pod of "
    "the route in the namespace, then divided (never an average of per-pod ratios). Independent of "
    "the pod and window selectors."
)


def fleet_row() -> list[tuple[dict, int, int]]:
    alpha = share(
        "Fleet acceptance rate α per route (all pods, 5m)",
        FLEET_NOTE + " α = Σ rate(accepted tokens) / Σ rate(draft tokens).",
        [fleet_rule("A", "namespace_route:specwatch_acceptance_ratio:ratio_rate5m", "α {{route}}")],
    )
    tau = timeseries(
        "Fleet τ and K per route",
        FLEET_NOTE + " τ = 1 + Σ accepted / Σ drafts; K = Σ draft tokens / Σ drafts.",
        [
            fleet_rule("A", "namespace_route:specwatch_mean_acceptance_length_tokens:ratio_rate5m", "τ {{route}}"),
            fleet_rule("B", "namespace_route:specwatch_draft_length_tokens:ratio_rate5m", "K {{route}}"),
        ],
        unit="none",
        min_=0,
        decimals=2,
        overrides=[by_prefix("K ", dashed("purple"))],
    )
    pos = share(
        "Fleet per-position acceptance p_i",
        FLEET_NOTE,
        [
            fleet_rule(
                "A",
                "namespace_route_position:specwatch_position_acceptance_ratio:ratio_rate5m",
                "{{route}} pos {{position}}",
            )
        ],
    )
    itl = timeseries(
        "Fleet ITL per step P50 / P99 and per-token mean",
        FLEET_NOTE + " Quantiles come from the mirrored vLLM ITL histogram summed over pods (per step, "
        "see the Latency row); the per-token mean is Σ ITL sum / Σ generated tokens.",
        [
            fleet_rule("A", "namespace_route:specwatch_itl_seconds:p50_rate5m", "P50 {{route}}"),
            fleet_rule("B", "namespace_route:specwatch_itl_seconds:p99_rate5m", "P99 {{route}}"),
            fleet_rule("C", "namespace_route:specwatch_itl_per_token_seconds:ratio_rate5m", "per token {{route}}"),
        ],
        unit="s",
        min_=0,
        overrides=[by_prefix("per token ", dashed("blue"))],
    )
    tokens = timeseries(
        "Fleet tokens/s per route",
        FLEET_NOTE,
        [
            fleet_rule("A", "namespace_route:specwatch_generation_tokens:rate5m", "generated {{route}}"),
            fleet_rule("B", "namespace_route:specwatch_draft_tokens:rate5m", "drafted {{route}}"),
            fleet_rule("C", "namespace_route:specwatch_accepted_tokens:rate5m", "accepted {{route}}"),
            fleet_rule("D", "namespace_route:specwatch_drafts:rate5m", "drafts {{route}}"),
        ],
        unit="short",
        min_=0,
    )
    return [(alpha, 8, 8), (tau, 8, 8), (pos, 8, 8), (itl, 12, 8), (tokens, 12, 8)]


def health_row() -> list[tuple[dict, int, int]]:
    up = up_stat(
        "Target up",
        "Whether the sidecar's last poll of each vLLM /metrics target succeeded (SpecDecodeTargetDown).",
        [target("A", f"specwatch_target_up{{{TARGET}}}", "{{pod}} · {{target}}", instant=True)],
    )
    age = stat(
        "Since last good poll",
        "Seconds since the last successful poll of each target. Above a few poll intervals the derived "
        "gauges go absent.",
        [
            target(
                "A",
                f"time() - specwatch_last_scrape_success_timestamp_seconds{{{TARGET}}}",
                "{{pod}} · {{target}}",
                instant=True,
            )
        ],
        unit="s",
        decimals=0,
        thresh=thresholds((None, "green"), (30, "yellow"), (120, "red")),
    )
    info = listing(
        "Sidecar and routes",
        "specwatch version per pod, and each route's target, vLLM model name, drafting method and metric "
        "schema (V1 / V0) as the sidecar detected them.",
        [
            target(
                "A",
                f"max by (namespace, pod, version) (specwatch_build_info{{{POD}}})",
                "{{pod}}: specwatch {{version}}",
                instant=True,
            ),
            target(
                "B",
                f"max by (namespace, pod, route, target, model_name, method, schema, engine) "
                f"(specwatch_route_info{{{ROUTE}}})",
                "{{pod}}: {{route}} → {{target}} · {{engine}} · {{model_name}} · {{method}} · {{schema}}",
                instant=True,
            ),
        ],
        value_size=12,
    )
    errors = timeseries(
        "Poll errors by reason",
        "Failed polls of the vLLM targets per second, by reason (timeout, connection, HTTP status, parse, "
        "size). Derived gauges go absent while a target fails.",
        [
            target(
                "A",
                f"sum by (namespace, pod, target, reason) (rate(specwatch_scrape_errors_total{{{TARGET}}}"
                f"[$__rate_interval]))",
                "{{reason}} {{pod}} · {{target}}",
            )
        ],
        unit="reqps",
        min_=0,
    )
    resets = timeseries(
        "Target restarts (vLLM counter resets)",
        "vLLM restarts seen by the sidecar: polls where the target's counters dropped or a _created timestamp "
        "changed. Windows follow Prometheus's reset rule, so a restart never changes a verdict by itself.",
        [
            target(
                "A",
                f"sum by (namespace, pod, target) (increase(specwatch_target_restarts_total{{{TARGET}}}"
                f"[$__rate_interval]))",
                "{{pod}} · {{target}}",
            )
        ],
        unit="short",
        min_=0,
    )
    duration = timeseries(
        "Poll duration",
        "Duration of the sidecar's last poll of each target (HTTP GET and parse).",
        [target("A", f"specwatch_scrape_duration_seconds{{{TARGET}}}", "{{pod}} · {{target}}")],
        unit="s",
        min_=0,
    )
    return [(up, 5, 5), (age, 5, 5), (info, 14, 5), (errors, 8, 7), (resets, 8, 7), (duration, 8, 7)]


# Fleet mode (docs/fleet.md): the query source's health on specwatch's own target, and the fleet rows
# per route. They carry specwatch's pod labels, not the replicas', so only cluster, route and window apply.
SOURCE = 'cluster=~"$cluster"'
FLEETMODE = SOURCE + ', route=~"$route", window="$window"'
FLEETMODE_NOTE = "Fleet mode only (one specwatch reading every replica from Prometheus); empty in sidecar mode."


def fleet_mode_row() -> list[tuple[dict, int, int]]:
    up = up_stat(
        "Query source up",
        FLEETMODE_NOTE + " 1 if the last poll's queries all succeeded (SpecwatchPrometheusDown). While it is 0 "
        "specwatch serves no per-replica gauge and every other panel goes empty.",
        [target("A", f"specwatch_prometheus_up{{{SOURCE}}}", "{{pod}}", instant=True)],
    )
    age = stat(
        "Since last good query poll",
        FLEETMODE_NOTE + " Seconds since the last successful poll of the query API.",
        [
            target(
                "A",
                f"time() - specwatch_prometheus_last_success_timestamp_seconds{{{SOURCE}}}",
                "{{pod}}",
                instant=True,
            )
        ],
        unit="s",
        decimals=0,
        thresh=thresholds((None, "green"), (60, "yellow"), (300, "red")),
    )
    stale = stat(
        "Stale replicas",
        FLEETMODE_NOTE + " Replica routes left out because their newest sample is older than two scrape "
        "intervals (SpecwatchStaleReplicas).",
        [target("A", f"specwatch_stale_replicas{{{SOURCE}}}", "{{pod}}", instant=True)],
        decimals=0,
        thresh=thresholds((None, "green"), (1, "red")),
    )
    errors = timeseries(
        "Query errors by reason",
        FLEETMODE_NOTE + " Failed polls of the query API per second, by reason (docs/fleet.md, Faults; "
        "SpecwatchPrometheusQueryErrors).",
        [
            target(
                "A",
                f"sum by (cluster, pod, reason) (rate(specwatch_prometheus_query_errors_total{{{SOURCE}}}"
                f"[$__rate_interval]))",
                "{{reason}} {{pod}}",
            )
        ],
        unit="reqps",
        min_=0,
    )
    alpha = share(
        "Fleet-mode acceptance rate α per route",
        FLEETMODE_NOTE + " Token-weighted α over the route's replicas (Σ accepted / Σ proposed), $window window.",
        [target("A", f"specwatch_fleet_acceptance_ratio{{{FLEETMODE}}}", "α {{route}}")],
    )
    losing = share(
        "Decode tokens on losing replicas",
        FLEETMODE_NOTE + " Share of the route's decode tokens served by replicas where speculation loses "
        "(expected speedup < 1).",
        [target("A", f"specwatch_fleet_losing_tokens_ratio{{{FLEETMODE}}}", "{{route}}")],
    )
    verdicts = timeseries(
        "Replicas per verdict",
        FLEETMODE_NOTE + " Number of the route's replicas per current verdict.",
        [target("A", f"sum by (route, verdict) (specwatch_fleet_replicas{{{FLEETMODE}}})", "{{route}} {{verdict}}")],
        unit="short",
        min_=0,
        decimals=0,
    )
    return [(up, 6, 5), (age, 6, 5), (stale, 6, 5), (errors, 6, 5), (alpha, 8, 8), (losing, 8, 8), (verdicts, 8, 8)]


ROWS = [
    ("Verdict", verdict_row),
    ("Acceptance", acceptance_row),
    ("Latency", latency_row),
    ("Load", load_row),
    ("Fleet", fleet_row),
    ("Fleet mode: query source and fleet rows", fleet_mode_row),
    ("Health", health_row),
]


def layout() -> list[dict]:
    panels: list[dict] = []
    y = 0
    pid = 1
    for title, make in ROWS:
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": pid,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        pid += 1
        y += 1
        x, line_h = 0, 0
        for body, w, h in make():
            if x + w > 24:
                x, y, line_h = 0, y + line_h, 0
            panel = {"id": pid, **body, "gridPos": {"h": h, "w": w, "x": x, "y": y}}
            if panel["title"] in PANEL_RUNBOOKS:
                panel["links"] = [
                    link(f"Runbook: {name}", f"{RUNBOOK}#{name.lower()}") for name in PANEL_RUNBOOKS[panel["title"]]
                ]
            panels.append(panel)
            pid += 1
            x += w
            line_h = max(line_h, h)
        y += line_h
    return panels


def variables() -> list[dict]:
    def query_var(
        name: str,
        label: str,
        query: str,
        *,
        multi: bool,
        include_all: bool,
        description: str,
        current: dict | None = None,
    ) -> dict:
        v = {
            "type": "query",
            "name": name,
            "label": label,
            "description": description,
            "datasource": DS,
            "query": query,
            "definition": query,
            "refresh": 2,
            "sort": 1,
            "multi": multi,
            "includeAll": include_all,
            "options": [],
        }
        if include_all:
            v["allValue"] = ".*"
        v["current"] = current or ({"text": ["All"], "value": ["$__all"]} if include_all else {"text": "", "value": ""})
        return v

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "regex": "",
            "current": {"text": "default", "value": "default"},
            "options": [],
            "refresh": 1,
        },
        query_var(
            "cluster",
            "Cluster",
            "label_values(specwatch_build_info, cluster)",
            multi=True,
            include_all=True,
            description="Cluster (the `cluster` label of a multi-cluster Prometheus, "
            "Thanos or Mimir). Empty with one cluster: All matches series without the label.",
        ),
        query_var(
            "namespace",
            "Namespace",
            'label_values(specwatch_route_info{cluster=~"$cluster"}, namespace)',
            multi=True,
            include_all=True,
            description="Kubernetes namespace of the vLLM replicas (from the route series, not specwatch's own pod: "
            "in fleet mode specwatch runs in another namespace, e.g. monitoring).",
        ),
        query_var(
            "pod",
            "Pod",
            'label_values(specwatch_route_info{cluster=~"$cluster", namespace=~"$namespace"}, pod)',
            multi=True,
            include_all=True,
            description="Pods running specwatch: the vLLM pods (sidecar mode) or the exporter (standalone).",
        ),
        query_var(
            "target",
            "Target",
            'label_values(specwatch_route_info{cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"}, target)',
            multi=True,
            include_all=True,
            description="vLLM endpoint polled by specwatch (one per sidecar; many per standalone exporter).",
        ),
        query_var(
            "engine",
            "Engine",
            'label_values(specwatch_route_info{cluster=~"$cluster", namespace=~"$namespace", '
            'pod=~"$pod", target=~"$target"}, engine)',
            multi=True,
            include_all=True,
            description="Serving engine the target speaks (vllm, llamacpp, lmdeploy, ray-vllm, ...); narrows the "
            "models and routes below.",
        ),
        query_var(
            "model_name",
            "Model",
            'label_values(specwatch_route_info{cluster=~"$cluster", namespace=~"$namespace", '
            'pod=~"$pod", target=~"$target", engine=~"$engine"}, model_name)',
            multi=True,
            include_all=True,
            description="vLLM --served-model-name; narrows the routes below.",
        ),
        query_var(
            "route",
            "Route",
            'label_values(specwatch_route_info{cluster=~"$cluster", namespace=~"$namespace", '
            'pod=~"$pod", target=~"$target", engine=~"$engine", model_name=~"$model_name"}, route)',
            multi=True,
            include_all=True,
            description="Traffic class whose acceptance is judged (default: one per vLLM model name).",
        ),
        query_var(
            "window",
            "Window",
            'label_values(specwatch_verdict{cluster=~"$cluster", namespace=~"$namespace"}, window)',
            multi=False,
            include_all=False,
            description="Rolling window of the sidecar's derived gauges; every query pins it.",
            current={"text": "5m", "value": "5m"},
        ),
    ]


def annotations() -> list[dict]:
    return [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        {
            "name": "specwatch alerts",
            "datasource": DS,
            "enable": True,
            "hide": False,
            "iconColor": "red",
            "expr": 'ALERTS{alertname=~"SpecDecode.*|Specwatch.*", alertstate="firing", cluster=~"$cluster", '
            'namespace=~"$namespace"}',
            "step": "60s",
            "titleFormat": "{{alertname}}",
            "textFormat": "{{severity}} · {{route}} {{pod}} {{target}}",
            "tagKeys": "severity,route,pod",
            "useValueForTime": False,
        },
        {
            # A verdict series that is current now and was not a minute ago: the verdict changed.
            "name": "verdict changes",
            "datasource": DS,
            "enable": True,
            "hide": False,
            "iconColor": "orange",
            "expr": f"(specwatch_verdict{{{WIN}}} == 1) unless (specwatch_verdict{{{WIN}}} offset 1m == 1)",
            "step": "60s",
            "titleFormat": "verdict → {{verdict}}",
            "textFormat": "{{route}} · {{pod}} · {{target}} ({{window}} window)",
            "tagKeys": "verdict,route",
            "useValueForTime": False,
        },
        {
            "name": "vLLM restarts",
            "datasource": DS,
            "enable": True,
            "hide": False,
            "iconColor": "purple",
            "expr": f"increase(specwatch_target_restarts_total{{{TARGET}}}[2m]) > 0",
            "step": "60s",
            "titleFormat": "vLLM restarted",
            "textFormat": "{{pod}} · {{target}}: counters reset",
            "tagKeys": "pod,target",
            "useValueForTime": False,
        },
    ]


def build() -> dict:
    return {
        "uid": "specwatch",
        "title": "specwatch: speculative decoding",
        "description": "Is vLLM's speculative decoding paying for itself at the live batch size? Acceptance "
        "against break-even, ITL tails, batch, verdicts and the recommended config, from the "
        "specwatch sidecar.",
        "tags": ["specwatch", "vllm", "speculative-decoding"],
        # Shipped like a mixin: provisioned, UTC, not editable in the UI (edit this generator instead).
        "editable": False,
        "graphTooltip": 1,
        "timezone": "utc",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {"refresh_intervals": ["10s", "30s", "1m", "5m", "15m"]},
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [link("specwatch runbook", f"{RUNBOOK}#", tooltip="What each specwatch alert means and what to do")],
        "annotations": {"list": annotations()},
        "templating": {"list": variables()},
        "panels": layout(),
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python dashboards/generate.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
