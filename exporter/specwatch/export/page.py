"""The page at `/`: the answer to "is speculative decoding paying for itself at the live batch size?"
for a person who opens the sidecar's port before they ever wire Grafana.

Pure: a published View (its config included) and the PageHistory -> the HTML bytes.
The poller renders it once per poll (service.py `_publish`), so serving it is handing out bytes, as
for /metrics; a request never renders anything.

It shows what /api/v1/status holds (the same per-window records, status.window_status): per route
and window alpha, break-even, margin, batch, expected speedup, the verdict and the candidate verdict
with its hold, the recommended --speculative-config to paste, target health with the last error,
and what the cost model assumed; plus two server-side SVG plots per route over the last hour
(alpha against break-even, ITL P50/P99) in the window the alert rules read.

Choices:
- Inline SVG drawn here, no JavaScript at all: the page must work air-gapped (no CDN, nothing
  fetched), stay small, and a browser draws polylines with nothing to load. A Content-Security-
  Policy meta tag (default-src 'none', inline styles only) makes any script or external fetch
  impossible even if escaping were ever wrong.
- It refreshes itself with <meta http-equiv="refresh"> every poll interval: the page is rebuilt per
  poll anyway, so reloading it is exactly as fresh as polling /api/v1/status from a script would be,
  with no client code to keep in step with the JSON.
- Everything from a target, a route match or Prometheus (label values are attacker-controlled) is
  HTML-escaped, in text and attributes alike, and Unicode bidi controls in it are shown as their
  code points ("[U+202E]"): a label cannot reorder what the page says around it. Absent values are
  "—", never 0. The server sends the same policy as an HTTP header (serve/http_server.py), with
  nosniff and frame-ancestors, which a meta tag cannot carry.
- Bounded: names and label values are clipped to MAX_LABEL_CHARS (other text to MAX_TEXT_CHARS)
  with an ellipsis; at most MAX_ROUTES route sections, and fewer when their bytes would take the
  page past MAX_PAGE_BYTES ("and N more" says how many were left out); plots for the first
  MAX_PLOTTED of them, at most one plotted point per pixel column. A page with 50 routes is some
  hundred kB; no label values make it larger than MAX_PAGE_BYTES.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specwatch import __version__
from specwatch.base.urls import redact_url
from specwatch.config import Config
from specwatch.costmodel import MAX_BATCH_LIMIT
from specwatch.engines.advice import VLLM_ENGINES
from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.export.assumptions import view_assumptions
from specwatch.export.page_history import PageHistory, SeriesKey, fleet_order
from specwatch.export.status import window_status
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view import View
from specwatch.view.fleet import FleetRow, FleetState, ReplicaRouteState, replica_name
from specwatch.view.targets import State, TargetState

__all__ = [
    "BIDI_CONTROLS",
    "CONTENT_SECURITY_POLICY",
    "MAX_LABEL_CHARS",
    "MAX_PAGE_BYTES",
    "MAX_PLOTTED",
    "MAX_ROUTES",
    "render_page",
]

MAX_ROUTES = 50  # route sections on the page (fleet mode: replica-routes); the rest are counted
MAX_PLOTTED = 12  # of those, the first ones get the two plots
MAX_TARGETS = 50
MAX_FLEET_ROWS = 100
MAX_LABELS = 12  # label pairs shown per replica
MAX_LABEL_CHARS = 120  # a name or label value (route, target, replica, model...), then "…"
MAX_TEXT_CHARS = 1024  # any other text (a message, a command), then "…"
MAX_PAGE_BYTES = 512 * 1024  # the whole page; 64 names of 60 kB once made 3.8 MiB
PAGE_RESERVE = 32 * 1024  # of MAX_PAGE_BYTES: the head, the header, the banner and the closing lines
#: Unicode bidi controls (embeddings, overrides, isolates, marks): a label holding one could make the
#: text after it read differently from what it is, so each is shown as its code point instead.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI_VISIBLE = str.maketrans({c: f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS})
#: The page's Content-Security-Policy: nothing fetched, no script, inline styles and data: images only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
)
DASH = "—"
QUESTION = "Is vLLM's speculative decoding paying for itself at the live batch size?"

#: What each verdict answers, in words.
ANSWERS = {
    "keep": "paying for itself",
    "shorten": "pays only with a shorter draft",
    "disable": "not paying: turn it off",
    "spec_off": "speculation is off",
    "insufficient_data": "no verdict yet: too few drafts in the window, or an input missing",
    "undecided": "the data cannot decide: measure",
}

# Plot geometry (px): width, height and the margins around the plotting area.
W, H, ML, MR, MT, MB = 460, 160, 46, 10, 10, 22
PW, PH = W - ML - MR, H - MT - MB
COLUMN_PX = 2  # one plotted point per this many pixels (an hour at 5 s is 720 points on 404 px)

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1280px;padding:12px 20px;
color:#1c2430;background:#fbfbfc}
h1{font-size:20px;margin:4px 0}h2{font-size:17px;margin:22px 0 4px}h3{font-size:14px;margin:12px 0 4px}
.q{font-size:16px;margin:2px 0 6px}.meta,.small{color:#5b6573;font-size:12.5px}
table{border-collapse:collapse;margin:4px 0 8px}th,td{padding:3px 8px;border-bottom:1px solid #e3e6ea;
text-align:right;white-space:nowrap}th{background:#f0f2f5;font-weight:600}td.l,th.l{text-align:left}
.v{font-weight:600;border-radius:3px;padding:1px 6px}
.v-keep{background:#d7f2dc;color:#14532d}.v-shorten{background:#fdf0c4;color:#713f12}
.v-disable{background:#fbd5d5;color:#7f1d1d}.v-undecided{background:#e0e7ff;color:#3730a3}.v-spec_off,.v-insufficient_data,.v-none{background:#e6e8ec;color:#374151}
.down{color:#b91c1c;font-weight:600}.up{color:#15803d;font-weight:600}
.err{color:#7f1d1d;font-family:ui-monospace,monospace;font-size:12px;white-space:normal;max-width:520px;text-align:left}
pre{background:#f0f2f5;padding:6px 8px;margin:2px 0 6px;white-space:pre-wrap;word-break:break-all;font-size:12.5px}
.warn{background:#fff4d6;border-left:4px solid #e0a100;padding:6px 10px}
.bad{background:#fde2e2;border-left:4px solid #c62828;padding:6px 10px}
.route{border-top:2px solid #d6dbe1;margin-top:16px}.plots{display:flex;flex-wrap:wrap;gap:12px}
svg{background:#fff;border:1px solid #e3e6ea}svg text{font:10.5px system-ui,sans-serif;fill:#5b6573}
svg .grid{stroke:#eceef1}svg .t{font-weight:600;fill:#1c2430}
polyline{fill:none;stroke-width:1.6}.alpha{stroke:#1f6feb}.breakeven{stroke:#d1242f;stroke-dasharray:5 3}
.p99{stroke:#8250df}.p50{stroke:#1a7f37}line.key{stroke-width:2.5}
"""


# ---- formatting --------------------------------------------------------------------------------
def clip(text: str, limit: int) -> str:
    """`text`, or its first limit - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def esc(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Any value as HTML text or attribute content (quotes escaped too), at most `limit` characters
    of it, bidi controls shown as their code points."""
    return html.escape(clip(str(value), limit).translate(_BIDI_VISIBLE), quote=True)


def label(value: object) -> str:
    """A name or label value (from a target, a route match or Prometheus), escaped and clipped."""
    return esc(value, MAX_LABEL_CHARS)


def size(text: str) -> int:
    """Bytes as served (UTF-8)."""
    return len(text.encode())


def _finite(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def num(x: object, fmt: str = ".3f", suffix: str = "") -> str:
    """A number as text; absent (None, NaN, inf, not a number) is the dash, never 0."""
    v = _finite(x)
    return DASH if v is None else f"{v:{fmt}}{suffix}"


def ms(seconds: object) -> str:
    v = _finite(seconds)
    return DASH if v is None else f"{v * 1000:.1f} ms"


def ago(then: float | None, now: float | None) -> str:
    if then is None or now is None:
        return DASH
    d = max(now - then, 0.0)
    if d < 120:
        return f"{d:.0f} s ago"
    if d < 7200:
        return f"{d / 60:.0f} min ago"
    return f"{d / 3600:.1f} h ago"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def badge(verdict: str | None) -> str:
    name = verdict if verdict in ANSWERS else "none"
    return f'<span class="v v-{name}">{esc(verdict or "no verdict")}</span>'


def td(text: str, cls: str = "") -> str:
    """A cell of already-escaped text."""
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def _table(head: Sequence[str], rows: Iterable[str], left: int = 1) -> str:
    cells = "".join(f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(head))
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# ---- plots -------------------------------------------------------------------------------------
def _polylines(points: Sequence[tuple[float, float]], t0: float, span: float, ymax: float, peak: bool) -> list[str]:
    """The `points` attribute of each gap-free run, at most one point per COLUMN_PX pixels (the
    mean, or the peak for a tail), clamped to the plotting area. One pass over time-ordered points."""
    scale = PW / span / COLUMN_PX
    runs: list[list[str]] = [[]]
    column, total, count, top, gap = -1, 0.0, 0, -math.inf, False

    def close() -> None:
        if count:
            v = top if peak else total / count
            y = MT + PH - min(max(v / ymax, 0.0), 1.0) * PH
            runs[-1].append(f"{ML + column * COLUMN_PX},{y:.1f}")
        elif gap and runs[-1]:
            runs.append([])

    for t, v in points:
        c = round((t - t0) * scale)
        if c < 0:
            continue
        if c != column:
            close()
            column, total, count, top, gap = c, 0.0, 0, -math.inf, False
        if math.isfinite(v):  # absent (NaN) is a gap
            total += v
            count += 1
            top = max(top, v)
        else:
            gap = True
    close()
    return [" ".join(run) for run in runs if run]


def _nice(x: float) -> float:
    """The smallest 1-2-5 step number at or above x."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    exp = 10.0 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= x:
            return m * exp
    return 10 * exp


def chart(
    title: str,
    lines: Sequence[tuple[str, str, Sequence[tuple[float, float]], bool]],
    *,
    t_end: float | None,
    span: float,
    ymax: float,
    ylabel: Any,
) -> str:
    """An inline SVG line plot. lines: (legend, css class, (t, value) points, plot the peak)."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
    ]
    for i in range(3):
        y = MT + PH - i * PH / 2
        parts.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{ML - 4}" y="{y + 3.5:.1f}" text-anchor="end">{esc(ylabel(ymax * i / 2))}</text>')
    parts.append(f'<text x="{ML}" y="{H - 6}">−{esc(duration(span))}</text>')
    parts.append(f'<text x="{W - MR}" y="{H - 6}" text-anchor="end">now</text>')
    drawn = 0
    legend_x = ML + 60
    for label, cls, points, peak in lines:
        if t_end is not None:
            for run in _polylines(points, t_end - span, span, ymax, peak):
                parts.append(f'<polyline class="{cls}" points="{run}"/>')
                drawn += 1
        parts.append(f'<line class="{cls} key" x1="{legend_x}" x2="{legend_x + 14}" y1="{H - 10}" y2="{H - 10}"/>')
        parts.append(f'<text x="{legend_x + 17}" y="{H - 6}">{esc(label)}</text>')
        legend_x += 24 + 6 * len(label)
    parts.append(f'<text class="t" x="{ML + 6}" y="{MT + 12}">{esc(title)}</text>')
    if not drawn:
        parts.append(f'<text x="{ML + PW / 2}" y="{MT + PH / 2}" text-anchor="middle">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)


def plots(history: PageHistory, key: SeriesKey, poll_interval: float) -> str:
    """Alpha against break-even and the ITL tails of one route-window over the last hour."""
    series = history.series(key)
    t_end = series.last_t() if series is not None else None
    since = -math.inf if t_end is None else t_end - history.horizon

    def col(name: str) -> list[tuple[float, float]]:
        return series.column(name, since) if series is not None else []

    first = col("t")
    # The span drawn: what there is, at least ten polls, at most the horizon.
    span = history.horizon
    if t_end is not None and first:
        span = min(max(t_end - first[0][0], 10 * poll_interval, 60.0), history.horizon)
    alpha, breakeven = col("alpha"), col("breakeven")
    p50, p99 = col("itl_p50"), col("itl_p99")
    peak = max((v for _, v in p99 + p50 if math.isfinite(v)), default=0.0)
    window = key[2]
    return (
        '<div class="plots">'
        + chart(
            f"acceptance rate α vs break-even ({window})",
            [("α", "alpha", alpha, False), ("break-even", "breakeven", breakeven, False)],
            t_end=t_end,
            span=span,
            ymax=1.0,
            ylabel=lambda v: f"{v:.1f}",
        )
        + chart(
            f"inter-token latency ({window})",
            [("P99", "p99", p99, True), ("P50", "p50", p50, False)],
            t_end=t_end,
            span=span,
            ymax=_nice(peak * 1.1) if peak > 0 else 0.1,
            ylabel=lambda v: f"{v:.2g} s" if v >= 1 else f"{v * 1000:.0f} ms",
        )
        + "</div>"
    )


# ---- the parts ---------------------------------------------------------------------------------
def _basis_mark(record: dict[str, Any]) -> str:
    """A mark on alpha that is an engine's own gauge estimate, not a ratio of the window's counters."""
    return (
        ' <span title="mean of the engine\'s own gauge estimate, not a window ratio">(gauge mean)</span>'
        if record.get("acceptance_basis")
        else ""
    )


def _hold_text(record: Mapping[str, Any], since: float | None, now: float | None, hold: float) -> str:
    candidate = record.get("candidate_verdict")
    if candidate is None or candidate == record.get("verdict"):
        return DASH
    waited = DASH if since is None or now is None else duration(max(now - since, 0.0))
    return f"{badge(candidate)} <span class=small>for {esc(waited)} of a {esc(duration(hold))} hold</span>"


WINDOW_HEAD = (
    "window",
    "verdict",
    "candidate (hold)",
    "α",
    "break-even",
    "margin",
    "batch",
    "max spec. batch",
    "expected speedup",
    "ITL P50",
    "ITL P99",
    "drafts",
)


def windows_table(
    where: str, evaluations: Sequence[RouteEvaluation], history: PageHistory, config: Config, now: float | None
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """One route's windows as a table, and the records (window, window_status) behind it."""
    hold = config.decision.hold_seconds(config.poll_interval)
    rows, records = [], []
    for e in evaluations:
        record = window_status(e)
        records.append((e.stats.window, record))
        since = history.candidate_since((where, e.stats.route, e.stats.window))
        cannot_pay = record.get("speculation_cannot_pay")
        breakeven = num(record["breakeven_acceptance_rate"]) + (" (cannot pay)" if cannot_pay else "")
        speedup = num(record["expected_speedup"], ".2f", "×") + _interval_text(
            record["expected_speedup_lower"], record["expected_speedup_upper"], record["loss_probability"]
        )
        rows.append(
            "<tr>"
            + td(esc(e.stats.window), "l")
            + td(badge(record["verdict"]), "l")
            + td(_hold_text(record, since, now, hold), "l")
            + td(num(record["acceptance_rate"]) + _basis_mark(record))
            + td(breakeven)
            + td(num(record["acceptance_margin"], "+.3f"))
            + td(num(record["batch_size"], ".1f"))
            + td(_max_batch_text(record["max_speculative_batch_size"]))
            + td(speedup)
            + td(ms(record["itl_p50_seconds"]))
            + td(ms(record["itl_p99_seconds"]))
            + td(num(record["drafts"], ".0f"))
            + "</tr>"
        )
    return _table(WINDOW_HEAD, rows, left=3), records


def engine_of(evaluations: Sequence[RouteEvaluation]) -> str:
    """The engine a route's windows were read from."""
    return evaluations[0].stats.engine if evaluations else DEFAULT_ENGINE


def _engine_advice(r: Mapping[str, Any]) -> str | None:
    """Another engine's advice: its command, or no change."""
    if r.get("recommended_command"):
        return f"<pre>{esc(r['recommended_command'])}</pre>"
    return "no change: keep the speculative settings you run" if r.get("recommended_action") == "no_change" else None


def recommendations(records: Sequence[tuple[str, Mapping[str, Any]]], engine: str = DEFAULT_ENGINE) -> str:
    """What to do in ``engine``'s terms, per distinct recommendation (windows that agree share
    one), and the notes."""
    grouped: dict[str, list[str]] = defaultdict(list)
    vllm = engine in VLLM_ENGINES
    for window, r in records:
        text = _vllm_advice(r) if vllm else _engine_advice(r)
        if text is not None:
            grouped[text].append(window)
    out = []
    if grouped:
        heading = "<code>--speculative-config</code>" if vllm else f"speculative settings ({label(engine)})"
        out.append(f"<h3>Recommended {heading}</h3>")
        out += [
            f"<div><span class=small>window {esc(', '.join(ws))}:</span> {text}</div>" for text, ws in grouped.items()
        ]
    notes = sorted({str(n) for _, r in records for n in r.get("notes") or ()})
    if notes:
        out.append("<ul class=small>" + "".join(f"<li>{esc(n)}</li>" for n in notes[:10]) + "</ul>")
    return "".join(out)


def _vllm_advice(r: Mapping[str, Any]) -> str | None:
    """A window's recommendation for a vLLM route, as HTML; None without one."""
    action = r.get("recommended_action")
    if r.get("recommended_speculative_config_flag"):
        return f"<pre>{esc(r['recommended_speculative_config_flag'])}</pre>"
    if r.get("merge_into_your_speculative_config"):
        merge = json.dumps(r["merge_into_your_speculative_config"], separators=(",", ":"), default=str)
        return f"merge into your --speculative-config:<pre>{esc(merge)}</pre>"
    if action == "remove_speculative_config":
        return "<pre>remove --speculative-config (serve without speculative decoding)</pre>"
    if action == "no_change":
        return "no change: keep the --speculative-config you run"
    if action == "measure" and r.get("measurement"):
        return f"the data cannot decide; measure: {esc(r['measurement']['how'])}"
    return None


def _interval_text(lower: float | None, upper: float | None, loss: float | None = None) -> str:
    """The expected speedup's interval and the probability that speculation loses, after the
    speedup (nothing without an interval)."""
    if _finite(lower) is None or _finite(upper) is None:
        return ""
    losing = f", P(loss) {num(loss, '.2f')}" if _finite(loss) is not None else ""
    return f" <span class=small>({num(lower, '.2f')}–{num(upper, '.2f')}{losing})</span>"


def _chart_window(config: Config) -> str:
    """The window plotted: the one the alert rules read, else the first."""
    labels = list(config.window_labels)
    if config.alerting.window in config.windows:
        return labels[list(config.windows).index(config.alerting.window)]
    return labels[0] if labels else ""


def _headline(evaluations: Sequence[RouteEvaluation], window: str) -> RouteEvaluation | None:
    return next((e for e in evaluations if e.stats.window == window), evaluations[0] if evaluations else None)


def _max_batch_text(value: float | None) -> str:
    """The largest batch at which alpha still pays; at the search's cap it is a bound, not a value."""
    if _finite(value) is not None and value is not None and value >= MAX_BATCH_LIMIT:
        return f"≥ {MAX_BATCH_LIMIT} <span class=small>(search cap)</span>"
    return num(value, ".0f")


def answer_line(e: RouteEvaluation | None) -> str:
    """The one-line answer for a route, in its headline window."""
    if e is None:
        return f"{badge(None)} no window evaluated yet"
    words = ANSWERS.get(e.verdict or "", "no verdict yet")
    if e.verdict == "insufficient_data":
        facts = f"{num(e.stats.drafts, '.0f')} drafts, batch {num(e.batch_size, '.1f')} ({esc(e.stats.window)})"
        return f"{badge(e.verdict)} <b>{esc(words)}</b> <span class=small>{facts}</span>"
    facts = (
        f"α {num(e.acceptance_rate)} vs break-even {num(e.breakeven_acceptance_rate)} at batch "
        f"{num(e.batch_size, '.1f')}, expected speedup {num(e.expected_speedup, '.2f', '×')}"
        f"{_interval_text(e.expected_speedup_lower, e.expected_speedup_upper, e.loss_probability)}"
        f" ({esc(e.stats.window)})"
    )
    return f"{badge(e.verdict)} <b>{esc(words)}</b> <span class=small>{facts}</span>"


def targets_section(state: State, history: PageHistory) -> str:
    rows = []
    for t in state.targets[:MAX_TARGETS]:
        rows.append(_target_row(t, state.t, history))
    more = len(state.targets) - MAX_TARGETS
    tail = f"<p class=small>and {more} more targets</p>" if more > 0 else ""
    head = ("target", "URL", "health", "last success", "scrape", "polls", "errors", "last error")
    return "<h2>Targets</h2>" + _table(head, rows, left=3) + tail


def _errors_text(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{label(k)} {n}" for k, n in errors.items() if n) or DASH


def _last_error(name: str, history: PageHistory, now: float | None) -> str:
    err = history.errors.get(name)
    if err is None:
        return DASH
    message = f": {esc(err.message, 3 * MAX_LABEL_CHARS)}" if err.message else ""
    return f"<b>{label(err.reason)}</b>{message} <span class=small>({esc(ago(err.t, now))})</span>"


def _health(up: bool | None) -> str:
    if up is None:
        return '<span class="small">not polled yet</span>'
    return '<span class="up">up</span>' if up else '<span class="down">down</span>'


def _target_row(t: TargetState, now: float | None, history: PageHistory) -> str:
    return (
        "<tr>"
        + td(label(t.name), "l")
        + td(esc(redact_url(t.url), 2 * MAX_LABEL_CHARS), "l")
        + td(_health(t.up), "l")
        + td(esc(ago(t.last_success, now)))
        + td(ms(t.scrape_duration))
        + td(str(t.polls))
        + td(_errors_text(t.errors))
        + td(_last_error(t.name, history, now), "err")
        + "</tr>"
    )


def cost_model_section(state: State, config: Config) -> str:
    info = state.cost_model
    if info is None:
        return ""
    rows = [
        ("source", info.source),
        ("hardware", info.hardware),
        ("model", info.model),
        ("dtype", info.dtype),
        ("tensor parallel", info.tensor_parallel),
        ("drafter cost class", info.method),
        ("hold", duration(config.decision.hold_seconds(config.poll_interval))),
        ("min drafts per window", num(config.decision.min_drafts, ".0f")),
    ]
    body = "".join(f"<tr>{td(esc(k), 'l')}{td(label(v), 'l')}</tr>" for k, v in rows)
    warn = ""
    if info.source == "default":
        warn = (
            '<p class="warn">No hardware or model configured: the break-even rests on assumed defaults '
            "until the step-time curve is learned (set hardware/model, or a profile).</p>"
        )
    return f"<h2>What the cost model assumed</h2>{warn}<table><tbody>{body}</tbody></table>"


def _rests_on(line: str | None) -> str:
    """What the verdicts rest on, in one line (the assumptions block of /api/v1/status)."""
    return "" if line is None else f"<p class=meta>rests on: {esc(line)}</p>"


def _more(shown: int, total: int, what: str) -> str:
    more = total - shown
    return (
        f'<p class="warn">and {more} more {what} not shown (all are on /api/v1/status and /metrics)</p>'
        if more > 0
        else ""
    )


# ---- the modes ---------------------------------------------------------------------------------
def _route_budget(*fixed: str) -> int:
    """The bytes left to route sections once the parts that are always shown are counted."""
    return MAX_PAGE_BYTES - PAGE_RESERVE - sum(size(part) for part in fixed)


def sidecar_body(view: View, history: PageHistory) -> tuple[str, list[str | None]]:
    state, config = view.targets, view.config
    window = _chart_window(config)
    routes = [r for r in state.routes if r.current]
    answers: list[str] = []
    sections: list[str] = []
    basis = view_assumptions(view)
    rests_on = {
        (r.facts.target, r.facts.route): line for r, line in zip(basis.routes, basis.route_lines(), strict=True)
    }
    unmatched = ""
    if state.unmatched_routes:
        items = "".join(f"<li>{label(r)} (target {label(t)})</li>" for r, t, _ in state.unmatched_routes[:MAX_ROUTES])
        unmatched = f'<div class="warn">Configured routes that match nothing yet:<ul>{items}</ul></div>'
    rest = targets_section(state, history) + cost_model_section(state, config) + _rests_on(basis.summary())
    budget, used = _route_budget(unmatched, rest), 0
    for i, route in enumerate(routes[:MAX_ROUTES]):
        headline = _headline(route.evaluations, window)
        answer_row = (
            f"<tr>{td(f'<a href=#r{i}>{label(route.route)}</a>', 'l')}{td(label(route.target), 'l')}"
            f"{td(answer_line(headline), 'l')}</tr>"
        )
        table, records = windows_table(route.target, route.evaluations, history, config, state.t)
        meta = (
            f"target {label(route.target)} · engine {label(route.engine)} · model_name {label(route.model_name)} · "
            f"method {label(route.method)} · K {num(route.configured_k, '.0f')} · schema {label(route.schema)}"
            + (
                f" · spec-off ITL P99 baseline {ms(route.baseline_itl_p99_seconds)}"
                if route.baseline_itl_p99_seconds
                else ""
            )
        )
        plot = plots(history, (route.target, route.route, window), config.poll_interval) if i < MAX_PLOTTED else ""
        section = (
            f'<section class="route" id="r{i}"><h2>{label(route.route)} '
            f"{badge(headline.verdict if headline else None)}</h2>"
            f"<p class=meta>{meta}</p>{_rests_on(rests_on.get((route.target, route.route)))}"
            + (f"<p class=meta>{esc(route.controller.line)}</p>" if route.controller is not None else "")
            + f"{table}{recommendations(records, route.engine)}{plot}</section>"
        )
        used += size(answer_row) + size(section)
        if used > budget:  # the rest are counted, not shown: the page stays under MAX_PAGE_BYTES
            break
        answers.append(answer_row)
        sections.append(section)
    shown = len(sections)
    answer = (
        "<h2>The answer, per route</h2>"
        + (_table(("route", "target", "verdict"), answers, left=3) if answers else "<p>No route seen yet.</p>")
        + _more(shown, len(routes), "routes")
        + unmatched
    )
    body = answer + rest + "".join(sections) + _more(shown, len(routes), "routes")
    verdicts = [_headline(r.evaluations, window) for r in routes]
    return body, [e.verdict if e else None for e in verdicts]


def _fleet_row(row: FleetRow) -> str:
    verdicts = ", ".join(f"{label(v)} {n}" for v, n in row.verdicts.items() if n) or DASH
    return (
        "<tr>"
        + td(label(row.route), "l")
        + td(label(row.window), "l")
        + td(str(row.replicas))
        + td(verdicts, "l")
        + td(num(row.acceptance_rate))
        + td(num(None if row.losing_token_share is None else 100 * row.losing_token_share, ".1f", " %"))
        + td(num(row.generation_tokens, ".0f"))
        + "</tr>"
    )


def prometheus_section(fleet: FleetState, config: Config, history: PageHistory) -> str:
    url = redact_url(config.prometheus.url) if config.prometheus else DASH
    cells = (
        td(esc(url, 2 * MAX_LABEL_CHARS), "l")
        + td(_health(fleet.up), "l")
        + td(esc(ago(fleet.last_success, fleet.t)))
        + td(ms(fleet.query_duration))
        + td(str(fleet.queries_per_poll))
        + td(str(fleet.stale_replicas))
        + td(num(fleet.series, ".0f"))
        + td(_errors_text(fleet.errors))
        + td(_last_error("prometheus", history, fleet.t), "err")
    )
    head = (
        "Prometheus",
        "health",
        "last success",
        "query",
        "queries/poll",
        "stale replicas",
        "series",
        "errors",
        "last error",
    )
    zero = ""
    if fleet.series == 0:
        zero = '<p class="warn">The selector matches no series: check prometheus.selector.</p>'
    return "<h2>Query source</h2>" + _table(head, [f"<tr>{cells}</tr>"], left=2) + zero


def _replica_labels(replica: Sequence[tuple[str, str]]) -> str:
    shown = " · ".join(f"{label(k)} {label(v)}" for k, v in replica[:MAX_LABELS])
    more = len(replica) - MAX_LABELS
    return shown + (f" · and {more} more labels" if more > 0 else "")


def fleet_body(view: View, fleet: FleetState, history: PageHistory) -> tuple[str, list[str | None]]:
    config = view.config
    window = _chart_window(config)
    live = fleet_order(fleet)
    by_route: dict[str, list[ReplicaRouteState]] = {}
    for r in live:
        by_route.setdefault(r.route, []).append(r)
    rows_by_route: dict[str, list[FleetRow]] = defaultdict(list)
    for row in fleet.fleet:
        rows_by_route[row.route].append(row)
    fleet_rows = [_fleet_row(row) for row in fleet.fleet[:MAX_FLEET_ROWS]]
    fleet_head = ("route", "window", "replicas", "verdicts", "α (token-weighted)", "tokens where speedup < 1", "tokens")
    answer = "<h2>The fleet, per route</h2>" + (
        _table(fleet_head, fleet_rows, left=2) if fleet_rows else "<p>No replica evaluated yet.</p>"
    )
    answer += _more(len(fleet_rows), len(fleet.fleet), "fleet rows")
    basis = view_assumptions(view)
    rests_on = {
        (r.facts.target, r.facts.route): line for r, line in zip(basis.routes, basis.route_lines(), strict=True)
    }
    top = prometheus_section(fleet, config, history) + _rests_on(basis.summary()) + answer
    budget, used = _route_budget(top), 0
    sections: list[str] = []
    shown, full = 0, False
    for route, replicas in by_route.items():
        if shown >= MAX_ROUTES or full:
            break
        opening = f'<section class="route" id="r{shown}"><h2>{label(route)}</h2>'
        if rows_by_route.get(route):
            opening += "<h3>Fleet rows</h3>" + _table(fleet_head, [_fleet_row(r) for r in rows_by_route[route]], left=2)
        used += size(opening)
        part: list[str] = []
        for r in replicas:
            full = used > budget
            if shown >= MAX_ROUTES or full:
                break
            name = replica_name(r.replica)
            headline = _headline(r.evaluations, window)
            table, records = windows_table(name, r.evaluations, history, config, fleet.t)
            plot = plots(history, (name, r.route, window), config.poll_interval) if shown < MAX_PLOTTED else ""
            replica = (
                f"<h3>replica {label(name)} {badge(headline.verdict if headline else None)}</h3>"
                f"<p class=meta>{_replica_labels(r.replica)} · engine {label(r.engine)} · "
                f"model_name {label(r.model_name)} · method {label(r.method)}</p>"
                f"{_rests_on(rests_on.get((name, r.route)))}{table}{recommendations(records, engine_of(r.evaluations))}"
                f"{plot}"
            )
            used += size(replica)
            full = used > budget  # the rest are counted, not shown: the page stays under MAX_PAGE_BYTES
            if full:
                break
            part.append(replica)
            shown += 1
        if part:
            taken = len(part)
            more = _more(taken, len(replicas), f"replicas of {label(route)}") if taken < len(replicas) else ""
            sections.append(opening + "".join(part) + more + "</section>")
    body = top + "".join(sections)
    body += _more(shown, len(live), "replica-routes")
    verdicts = [e.verdict if (e := _headline(r.evaluations, window)) else None for r in live]
    return body, verdicts


def render_page(
    view: View,
    history: PageHistory,
    *,
    now: float | None = None,
    config_error: str | None = None,
    polling: bool = True,
) -> bytes:
    """The whole page as served at `/` (UTF-8). `now`: the wall time shown as "updated";
    config_error: the last config load failed (`polling`: a previous good config still runs)."""
    config = view.config
    refresh = max(1, math.ceil(config.poll_interval))
    if view.fleet is None:
        body, verdicts = sidecar_body(view, history)
        mode = "sidecar"
    else:
        body, verdicts = fleet_body(view, view.fleet, history)
        mode = "fleet"
    counts: dict[str, int] = defaultdict(int)
    for v in verdicts:
        counts[v or "no verdict"] += 1
    title = "specwatch: " + (", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no routes yet")
    updated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() if now is None else now))
    banner = ""
    if config_error:
        what = "the running config is kept" if polling else "nothing is polled until it is fixed"
        banner = f'<p class="bad">Config error ({what}): {esc(config_error[:500])}</p>'
    head = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        f'<meta http-equiv="refresh" content="{refresh}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
    )
    header = (
        f"<header><h1>specwatch</h1><p class=q>{esc(QUESTION)}</p><p class=meta>{mode} mode · specwatch "
        f"{esc(__version__)} · polls every {esc(duration(config.poll_interval))} · this page refreshes every "
        f"{refresh} s · updated {esc(updated)} · plots: window {esc(_chart_window(config))}, up to the last hour · "
        '<a href="/metrics">/metrics</a> · <a href="/api/v1/status">/api/v1/status</a> · '
        '<a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p></header>'
    )
    return (head + header + banner + body + "</body></html>").encode()
