"""The page at `/`: the answer to "is speculative decoding paying for itself at the live batch size?"
for a person who opens the sidecar's port before they ever wire Grafana.

Pure: a published View (its config included) and the PageHistory -> the HTML bytes.
The poller renders it once per poll (service.py `_publish`), so serving it is handing out bytes, as
for /metrics; a request never renders anything.

It shows what /api/v1/status holds (the same per-window records, status.window_status): per route
and window alpha, break-even, margin, batch, expected speedup, the verdict and the candidate verdict
with its hold, the recommended --speculative-config to paste, target health with the last error,
and what the cost model assumed, with how close each verdict is (the expected speedup's interval
against 1, in words); plus four server-side SVG plots per route over up to the last hour in the
window the alert rules read: alpha against break-even, the expected speedup with its interval
against 1, the verdict per poll and the ITL tails, each with a legend and <title> tooltips.
Both modes show one route list (route_list over View.route_rows: an answer row and a section per
route of a target, or per replica route); only the sidecar's targets and cost model, and fleet
mode's query source and fleet rows, are a mode's own.

Choices:
- Inline SVG drawn here, no JavaScript at all: the page must work air-gapped (no CDN, nothing
  fetched), stay small, and a browser draws polylines with nothing to load. A Content-Security-
  Policy meta tag (default-src 'none', inline styles only) makes any script or external fetch
  impossible even if escaping were ever wrong.
- It refreshes itself with <meta http-equiv="refresh"> every evaluation (Config.evaluation_period:
  evaluation_interval, by default each poll at 5 s polls): a new view is published at each, so
  reloading it is exactly as fresh as polling /api/v1/status from a script would be, with no client
  code to keep in step with the JSON.
- Everything from a target, a route match or Prometheus (label values are attacker-controlled) is
  HTML-escaped, in text and attributes alike, and Unicode bidi controls in it are shown as their
  code points ("[U+202E]"): a label cannot reorder what the page says around it. Absent values are
  "—", never 0. The server sends the same policy as an HTTP header (serve/http_server.py), with
  nosniff and frame-ancestors, which a meta tag cannot carry.
- Bounded: names and label values are clipped to MAX_LABEL_CHARS (other text to MAX_TEXT_CHARS)
  with an ellipsis; at most MAX_ROUTES route sections, and fewer when their bytes would take the
  page past MAX_PAGE_BYTES ("and N more" says how many were left out); plots for the first
  MAX_PLOTTED of them, each plot BUCKETS time buckets (min and max drawn) whatever the history's
  length. A page with 50 routes is some hundred kB; no label values make it larger than
  MAX_PAGE_BYTES.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from specwatch import __version__
from specwatch.base.urls import redact_url
from specwatch.config import Config
from specwatch.costmodel import MAX_BATCH_LIMIT
from specwatch.engines.advice import VLLM_ENGINES
from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.export.assumptions import Assumptions, view_assumptions
from specwatch.export.csp import CONTENT_SECURITY_POLICY
from specwatch.export.page_history import Bucket, PageHistory, SeriesKey, page_order, verdict_of
from specwatch.export.status import window_status
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view import View
from specwatch.view.fleet import FleetRow, FleetState
from specwatch.view.routes import RouteRow
from specwatch.view.targets import State, TargetState

__all__ = [
    "BIDI_CONTROLS",
    "CONTENT_SECURITY_POLICY",
    "MAX_LABEL_CHARS",
    "MAX_PAGE_BYTES",
    "MAX_PLOTTED",
    "MAX_ROUTES",
    "render_page",
    "runs_plain",
]

MAX_ROUTES = 50  # route sections on the page (fleet mode: replica-routes); the rest are counted
MAX_PLOTTED = 12  # of those, the first ones get the two plots
MAX_TARGETS = 50
MAX_FLEET_ROWS = 100
MAX_LABELS = 12  # label pairs shown per replica
MAX_LABEL_CHARS = 120  # a name or label value (route, target, replica, model...), then "…"
MAX_TEXT_CHARS = 1024  # any other text (a message, a command), then "…"
MAX_PAGE_BYTES = 512 * 1024  # the whole page, whatever names and labels the targets send
PAGE_RESERVE = 32 * 1024  # of MAX_PAGE_BYTES: the head, the header, the banner and the closing lines
#: Unicode bidi controls (embeddings, overrides, isolates, marks): a label holding one could make the
#: text after it read differently from what it is, so each is shown as its code point instead.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI_VISIBLE = str.maketrans({c: f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS})
#: Every character esc_plain changes: html.escape's five (quote=True) and the bidi controls.
_ESCAPED = re.compile(f"[&<>\"'{BIDI_CONTROLS}]")
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
W, H, ML, MR, MT, MB = 460, 170, 46, 10, 22, 22
PW, PH = W - ML - MR, H - MT - MB
BUCKETS = PW // 4  # time buckets per plot, whatever the history's length: min and max of each drawn

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
.p99{stroke:#8250df}.p50{stroke:#1a7f37}line.key{stroke-width:2.5}.speedup{stroke:#0b7285}
.band{fill:#0b7285;fill-opacity:.18;stroke:none}line.ref{stroke:#d1242f;stroke-dasharray:4 3;stroke-width:1.2}
.s-keep{fill:#2da44e}.s-shorten{fill:#d4a72c}.s-disable{fill:#cf222e}.s-undecided{fill:#7c8cf0}
.s-spec_off,.s-insufficient_data,.s-none{fill:#afb8c1}
"""


# ---- formatting --------------------------------------------------------------------------------
def clip(text: str, limit: int) -> str:
    """`text`, or its first limit - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def esc(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """``esc_plain``, returning a short string with nothing to escape as it is: most of a page's
    eighty or so texts are (route names, verdicts, numbers), and escaping them cost a third of
    drawing the page."""
    text = value if type(value) is str else str(value)
    if len(text) <= limit and _ESCAPED.search(text) is None:
        return text
    return esc_plain(text, limit)


def esc_plain(value: object, limit: int = MAX_TEXT_CHARS) -> str:
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
def _nice(x: float) -> float:
    """The smallest 1-2-5 step number at or above x."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    exp = 10.0 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= x:
            return m * exp
    return 10 * exp


def _y(v: float, ymin: float, ymax: float) -> float:
    """A value's y pixel, clamped to the plotting area."""
    return MT + PH - min(max((v - ymin) / (ymax - ymin), 0.0), 1.0) * PH


def _x(i: int) -> float:
    return ML + (i + 0.5) * PW / BUCKETS


def _x_text(i: int) -> str:
    """A line point's x as `_runs` writes it."""
    return f"{ML + (i + 0.5) * (PW / BUCKETS):.1f}"


#: Each bucket's x as the lines write it (the same in every plot and every render).
_X_TEXT = [_x_text(i) for i in range(BUCKETS)]


def _runs(buckets: Sequence[Bucket], ymin: float, ymax: float) -> list[str]:
    """The `points` attribute of each gap-free run of buckets: a bucket's min and max at its x (a
    spike keeps its height), the one nearer its last value second, so the line leaves from there.
    The x texts come from a table (`runs_plain` formats each; tested equal)."""
    runs: list[list[str]] = [[]]
    run = runs[-1]
    bottom, scale, height = MT + PH, PH / (ymax - ymin), ymax - ymin
    for i, lo, hi, last in buckets:
        if lo is None or hi is None or last is None:
            if run:
                run = []
                runs.append(run)
            continue
        x = _X_TEXT[i] if 0 <= i < BUCKETS else _x_text(i)
        # min(max(d, 0.0), height) written out: clamped to the plotting area, the same floats
        # (-0.0 and NaN pass through alike) without two calls per point
        if lo == hi:
            d = lo - ymin
            d = 0.0 if d < 0.0 else height if d > height else d
            run.append(f"{x},{bottom - d * scale:.1f}")
            continue
        first, second = (hi, lo) if last - lo < hi - last else (lo, hi)
        d = first - ymin
        d = 0.0 if d < 0.0 else height if d > height else d
        e = second - ymin
        e = 0.0 if e < 0.0 else height if e > height else e
        run.append(f"{x},{bottom - d * scale:.1f}")
        run.append(f"{x},{bottom - e * scale:.1f}")
    return [" ".join(run) for run in runs if run]


def runs_plain(buckets: Sequence[Bucket], ymin: float, ymax: float) -> list[str]:
    """`_runs` a point at a time, each x worked out where it is written: the reference the line
    drawing is tested against."""
    runs: list[list[str]] = [[]]
    bottom, scale, step = MT + PH, PH / (ymax - ymin), PW / BUCKETS
    for i, lo, hi, last in buckets:
        if lo is None or hi is None or last is None:
            if runs[-1]:
                runs.append([])
            continue
        x = ML + (i + 0.5) * step
        ends = (hi, lo) if last - lo < hi - last else (lo, hi)
        for v in ends if lo != hi else (lo,):
            y = bottom - min(max(v - ymin, 0.0), ymax - ymin) * scale  # clamped to the plotting area
            runs[-1].append(f"{x:.1f},{y:.1f}")
    return [" ".join(run) for run in runs if run]


def _band(lower: Sequence[Bucket], upper: Sequence[Bucket], ymin: float, ymax: float) -> list[str]:
    """The `points` of one polygon per gap-free run where both bounds exist: the upper bound's max
    left to right, the lower bound's min back."""
    lows = {i: lo for i, lo, _, _ in lower if lo is not None}
    runs: list[list[tuple[float, float, float]]] = [[]]
    for i, _, hi, _ in upper:
        lo = lows.get(i)
        if hi is None or lo is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((_x(i), _y(hi, ymin, ymax), _y(lo, ymin, ymax)))
    polygons = []
    for run in runs:
        if run:
            top = [f"{x:.1f},{yh:.1f}" for x, yh, _ in run]
            bottom = [f"{x:.1f},{yl:.1f}" for x, _, yl in reversed(run)]
            polygons.append(" ".join(top + bottom))
    return polygons


def _summary(name: str, buckets: Sequence[Bucket], fmt: Callable[[float], str]) -> str:
    """A series' tooltip: its latest value and its range over the span."""
    lows = [lo for _, lo, _, _ in buckets if lo is not None]
    highs = [hi for _, _, hi, _ in buckets if hi is not None]
    last = next((v for _, _, _, v in reversed(buckets) if v is not None), None)
    if last is None:
        return f"{name}: no data"
    return f"{name}: now {fmt(last)}, min {fmt(min(lows))}, max {fmt(max(highs))}"


def _frame(title: str, span: float, ymin: float, ymax: float, ylabel: Callable[[float], str]) -> list[str]:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
    ]
    for k in range(3):
        v = ymin + (ymax - ymin) * k / 2
        y = _y(v, ymin, ymax)
        parts.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{ML - 4}" y="{y + 3.5:.1f}" text-anchor="end">{esc(ylabel(v))}</text>')
    parts.append(f'<text x="{ML}" y="{H - 6}">−{esc(duration(span))}</text>')
    parts.append(f'<text x="{W - MR}" y="{H - 6}" text-anchor="end">now</text>')
    return parts


def chart(
    title: str,
    lines: Sequence[tuple[str, str, Sequence[Bucket]]],
    *,
    span: float,
    ymax: float,
    ylabel: Callable[[float], str],
    ymin: float = 0.0,
    band: tuple[str, Sequence[Bucket], Sequence[Bucket]] | None = None,
    reference: tuple[str, float] | None = None,
    fmt: Callable[[float], str] | None = None,
) -> str:
    """An inline SVG plot over the buckets of one span. lines: (legend, css class, buckets); band:
    (legend, lower buckets, upper buckets), a shaded interval; reference: (legend, value), a
    dashed horizontal line. Every series has a legend key and a <title> tooltip."""
    parts = _frame(title, span, ymin, ymax, ylabel)
    keys: list[str] = []
    drawn = 0
    fmt = fmt or ylabel  # the tooltips' numbers
    if band is not None:
        name, lower, upper = band
        tip = f"{_summary('lower', lower, fmt)}; {_summary('upper', upper, fmt)}"
        polygons = _band(lower, upper, ymin, ymax)
        if polygons:
            parts.append(f"<g><title>{esc(name)}: {esc(tip)}</title>")
            parts += [f'<polygon class="band" points="{p}"/>' for p in polygons]
            parts.append("</g>")
            drawn += 1
        keys.append(f'<rect class="band" x="{{x}}" y="{H - 14}" width="14" height="8"/>|{name}')
    if reference is not None:
        name, value = reference
        y = _y(value, ymin, ymax)
        parts.append(
            f'<line class="ref" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"><title>{esc(name)}</title></line>'
        )
        keys.append(f'<line class="ref key" x1="{{x}}" x2="{{x14}}" y1="{H - 10}" y2="{H - 10}"/>|{name}')
    for name, cls, buckets in lines:
        runs = _runs(buckets, ymin, ymax)
        if runs:
            parts.append(f"<g><title>{esc(_summary(name, buckets, fmt))}</title>")
            parts += [f'<polyline class="{cls}" points="{run}"/>' for run in runs]
            parts.append("</g>")
            drawn += 1
        keys.append(f'<line class="{cls} key" x1="{{x}}" x2="{{x14}}" y1="{H - 10}" y2="{H - 10}"/>|{name}')
    x = ML + 60
    for key in keys:
        shape, name = key.rsplit("|", 1)
        parts.append(shape.replace("{x}", str(x)).replace("{x14}", str(x + 14)))
        parts.append(f'<text x="{x + 17}" y="{H - 6}">{esc(name)}</text>')
        x += 24 + 6 * len(name)
    parts.append(f'<text class="t" x="{ML}" y="14">{esc(title)}</text>')
    if not drawn:
        parts.append(f'<text x="{ML + PW / 2}" y="{MT + PH / 2}" text-anchor="middle">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)


def verdict_strip(title: str, buckets: Sequence[Bucket], span: float) -> str:
    """The verdict of each poll as a colored strip (a bucket shows its last poll's verdict; adjacent
    buckets with the same verdict are one rectangle, its <title> naming it), with a legend of the
    verdicts shown."""
    h = 58
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" '
        f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
        f'<text class="t" x="{ML}" y="12">{esc(title)}</text>'
    ]
    step = PW / BUCKETS
    # A verdict holds from its poll to the next one: a rectangle runs to the next verdict's bucket.
    spans: list[tuple[str, int]] = []  # (verdict, first bucket)
    end = 0
    for i, _, _, last in buckets:
        verdict = (verdict_of(last) if last is not None else None) or "none"
        if not spans or spans[-1][0] != verdict:
            spans.append((verdict, i))
        end = i + 1
    seen: list[str] = []
    for k, (name, first) in enumerate(spans):
        if name not in seen:
            seen.append(name)
        stop = spans[k + 1][1] if k + 1 < len(spans) else end
        parts.append(
            f'<rect class="s-{name}" x="{ML + first * step:.1f}" y="18" width="{(stop - first) * step:.1f}" '
            f'height="16"><title>{esc(name)}</title></rect>'
        )
    parts.append(f'<text x="{ML}" y="{h - 6}">−{esc(duration(span))}</text>')
    parts.append(f'<text x="{W - MR}" y="{h - 6}" text-anchor="end">now</text>')
    x = ML + 60
    for name in seen:
        parts.append(f'<rect class="s-{name}" x="{x}" y="{h - 14}" width="10" height="10"/>')
        parts.append(f'<text x="{x + 13}" y="{h - 6}">{esc(name)}</text>')
        x += 20 + 6 * len(name)
    if not buckets:
        parts.append(f'<text x="{ML + PW / 2}" y="30" text-anchor="middle">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)


def _speedup_fmt(v: float) -> str:
    return f"{v:.2f}×"


def _itl_fmt(v: float) -> str:
    return f"{v:.2g} s" if v >= 1 else f"{v * 1000:.0f} ms"


def plots(history: PageHistory, key: SeriesKey, poll_interval: float) -> str:
    """One route-window's plots over the span it has history for (at most the horizon): alpha
    against break-even, the expected speedup with its interval against 1, the verdict per poll and
    the inter-token latency tails, each read as BUCKETS buckets."""
    series = history.series(key)
    t_end = series.last_t() if series is not None else None
    first = series.t_at(0) if series is not None else None
    # The span drawn: what there is, at least ten polls, at most the horizon.
    span = history.horizon
    if t_end is not None and first is not None:
        span = min(max(t_end - first, 10 * poll_interval, 60.0), history.horizon)

    cut = series.cut(t_end - span, t_end, BUCKETS) if series is not None and t_end is not None else []

    def col(name: str) -> list[Bucket]:
        return series.buckets(name, cut) if series is not None else []

    window = key[2]
    tail = f"({window} window, last {duration(span)})"
    alpha, breakeven = col("alpha"), col("breakeven")
    speedup, lower, upper = col("speedup"), col("speedup_lower"), col("speedup_upper")
    p50, p99 = col("itl_p50"), col("itl_p99")
    # The scale holds the speedup line and the latest interval: one still wide from the first polls
    # is clipped at the top rather than flattening the line the verdict follows.
    latest = next((last for _, _, _, last in reversed(upper) if last is not None), 0.0)
    top = max(max((hi for _, _, hi, _ in speedup if hi is not None), default=0.0), latest)
    peak = max((hi for _, _, hi, _ in p99 + p50 if hi is not None), default=0.0)
    return (
        '<div class="plots">'
        + chart(
            f"acceptance rate α vs break-even {tail}",
            [("α", "alpha", alpha), ("break-even", "breakeven", breakeven)],
            span=span,
            ymax=1.0,
            ylabel=lambda v: f"{v:.2f}",
        )
        + chart(
            f"expected speedup and its interval {tail}",
            [("speedup", "speedup", speedup)],
            span=span,
            ymax=max(2.0, _nice(top * 1.05)),
            ylabel=lambda v: f"{v:g}×",
            fmt=_speedup_fmt,
            band=("interval", lower, upper),
            reference=("1×", 1.0),
        )
        + chart(
            f"inter-token latency per token {tail}",
            [("P99", "p99", p99), ("P50", "p50", p50)],
            span=span,
            ymax=_nice(peak * 1.1) if peak > 0 else 0.1,
            ylabel=_itl_fmt,
        )
        + verdict_strip(f"verdict per poll {tail}", col("verdict"), span)
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
    hold = config.decision.hold_seconds(config.evaluation_period)
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
    v = _finite(value)
    if v is not None and v >= MAX_BATCH_LIMIT:
        tip = f"beyond the searched range: the search stops at {MAX_BATCH_LIMIT}"
        return f'≥ {MAX_BATCH_LIMIT} <span class=small title="{tip}">(search limit)</span>'
    return num(v, ".0f")


def decision_distance(lower: float | None, upper: float | None) -> str:
    """How close the decision is, in words: where the expected speedup's interval stands against
    the line at 1 that the verdict rests on (empty without an interval)."""
    lo, hi = _finite(lower), _finite(upper)
    if lo is None or hi is None:
        return ""
    if lo > 1:
        return f"lower bound {lo:.2f}, {lo - 1:.2f} above 1: speculation pays at this confidence"
    if hi < 1:
        return f"upper bound {hi:.2f}, {1 - hi:.2f} below 1: speculation loses at this confidence"
    return f"interval straddles 1: lower bound {lo:.2f}, needs > 1 to keep; upper bound {hi:.2f}, needs < 1 to disable"


def answer_line(e: RouteEvaluation | None, min_drafts: int | None = None) -> str:
    """The one-line answer for a route, in its headline window; min_drafts: the config's minimum,
    so a window with enough drafts is never told it has too few."""
    if e is None:
        return f"{badge(None)} no window evaluated yet"
    words = ANSWERS.get(e.verdict or "", "no verdict yet")
    if e.verdict == "insufficient_data":
        drafts = _finite(e.stats.drafts)
        if drafts is not None and min_drafts is not None:
            words = (
                f"no verdict yet: {drafts:.0f} drafts of the {min_drafts} needed"
                if drafts < min_drafts
                else f"no verdict yet: {drafts:.0f} drafts are enough, an input is missing"
            )
        facts = f"{num(e.stats.drafts, '.0f')} drafts, batch {num(e.batch_size, '.1f')} ({esc(e.stats.window)})"
        return f"{badge(e.verdict)} <b>{esc(words)}</b> <span class=small>{facts}</span>"
    facts = (
        f"α {num(e.acceptance_rate)} vs break-even {num(e.breakeven_acceptance_rate)} at batch "
        f"{num(e.batch_size, '.1f')}, expected speedup {num(e.expected_speedup, '.2f', '×')}"
        f"{_interval_text(e.expected_speedup_lower, e.expected_speedup_upper, e.loss_probability)}"
        f" ({esc(e.stats.window)})"
    )
    close = decision_distance(e.expected_speedup_lower, e.expected_speedup_upper)
    closeness = f"<br><span class=small>how close: {esc(close)}</span>" if close else ""
    return f"{badge(e.verdict)} <b>{esc(words)}</b> <span class=small>{facts}</span>{closeness}"


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


def _step_time_text(basis: Assumptions) -> str:
    """Where the step time comes from, per route once a curve is learned: the one statement of it
    on the page (the summary line below says what holds before a curve is learned)."""
    learned = [r.facts.route for r in basis.routes if r.facts.step_time == "learned"]
    before = f"{basis.step_time}{' until learned' if basis.learning else ''}"
    if not learned:
        return before
    shown = ", ".join(learned[:5]) + (f" and {len(learned) - 5} more" if len(learned) > 5 else "")
    others = len(basis.routes) - len(learned)
    return f"learned for {shown}" + (f"; {before} for the other {others}" if others else "")


def cost_model_section(state: State, config: Config, basis: Assumptions) -> str:
    info = state.cost_model
    if info is None:
        return ""
    rows = [
        ("step-time source", _step_time_text(basis)),
        ("hardware", info.hardware),
        ("model (cost model, every route)", info.model),
        ("dtype", info.dtype),
        ("tensor parallel", info.tensor_parallel),
        ("drafter cost class", info.method),
        ("hold", duration(config.decision.hold_seconds(config.evaluation_period))),
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


PER_ROUTE = (
    "Break-even and speedup are per route: each route has its own acceptance by draft position and its own "
    "step-time fit, so two routes at the same batch and K can have different break-evens."
)


def _per_route(routes: int) -> str:
    """The note that curves are per route, where more than one route is shown."""
    return f"<p class=small>{esc(PER_ROUTE)}</p>" if routes > 1 else ""


def _rests_on(line: str | None, before_learning: bool = False) -> str:
    """What the verdicts rest on, in one line (the assumptions block of /api/v1/status);
    before_learning: the config-wide line, which holds until a route's curve is learned."""
    if line is None:
        return ""
    what = "rests on, before any curve is learned" if before_learning else "rests on"
    return f"<p class=meta>{what}: {esc(line)}</p>"


def _summary_line(basis: Assumptions) -> str:
    return _rests_on(basis.summary(), before_learning=basis.learning)


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


def _row_meta(row: RouteRow) -> str:
    """Where a route's windows come from and what it runs, in one line."""
    where = (
        f"target {label(row.target)}"
        if row.replica_labels is None
        else f"replica {label(row.target)} · {_replica_labels(row.replica_labels)}"
    )
    return (
        f"{where} · engine {label(row.engine)} · served model_name {label(row.model_name)} · "
        f"method {label(row.method)} · K {num(row.configured_k, '.0f')} · schema {label(row.schema)}"
        + (f" · spec-off ITL P99 baseline {ms(row.baseline_itl_p99_seconds)}" if row.baseline_itl_p99_seconds else "")
    )


def route_list(
    view: View, history: PageHistory, rows: Sequence[RouteRow], basis: Assumptions, budget: int, where: str
) -> tuple[str, str, int]:
    """Either mode's routes: the answer table (a row per route of a target, or per replica route)
    and a section per row with its windows, advice and plots, as many as fit in `budget` bytes
    (at most MAX_ROUTES). Returns the answer table, the sections and how many were shown."""
    config = view.config
    window = _chart_window(config)
    rests_on = {
        (r.facts.target, r.facts.route): line for r, line in zip(basis.routes, basis.route_lines(), strict=True)
    }
    answers: list[str] = []
    sections: list[str] = []
    used = 0
    for i, row in enumerate(rows[:MAX_ROUTES]):
        headline = _headline(row.evaluations, window)
        answer_row = (
            f"<tr>{td(f'<a href=#r{i}>{label(row.route)}</a>', 'l')}{td(label(row.target), 'l')}"
            f"{td(answer_line(headline, config.decision.min_drafts), 'l')}</tr>"
        )
        table, records = windows_table(row.target, row.evaluations, history, config, view.t)
        plot = plots(history, (row.target, row.route, window), config.poll_interval) if i < MAX_PLOTTED else ""
        section = (
            f'<section class="route" id="r{i}"><h2>{label(row.route)} '
            f"{badge(headline.verdict if headline else None)}</h2>"
            f"<p class=meta>{_row_meta(row)}</p>{_rests_on(rests_on.get((row.target, row.route)))}"
            + (f"<p class=meta>{esc(row.controller.line)}</p>" if row.controller is not None else "")
            + f"{table}{recommendations(records, row.engine)}{plot}</section>"
        )
        used += size(answer_row) + size(section)
        if used > budget:  # the rest are counted, not shown: the page stays under MAX_PAGE_BYTES
            break
        answers.append(answer_row)
        sections.append(section)
    answer = (
        "<h2>The answer, per route</h2>"
        + (_table(("route", where, "verdict"), answers, left=3) if answers else "<p>No route seen yet.</p>")
        + _per_route(len(answers))
    )
    return answer, "".join(sections), len(sections)


def _verdicts(rows: Iterable[RouteRow], window: str) -> list[str | None]:
    return [e.verdict if (e := _headline(row.evaluations, window)) else None for row in rows]


def sidecar_body(view: View, history: PageHistory) -> tuple[str, list[str | None]]:
    state, config = view.targets, view.config
    rows = page_order(view.route_rows())
    basis = view_assumptions(view)
    unmatched = ""
    if state.unmatched_routes:
        items = "".join(f"<li>{label(r)} (target {label(t)})</li>" for r, t, _ in state.unmatched_routes[:MAX_ROUTES])
        unmatched = f'<div class="warn">Configured routes that match nothing yet:<ul>{items}</ul></div>'
    rest = targets_section(state, history) + cost_model_section(state, config, basis) + _summary_line(basis)
    answer, sections, shown = route_list(view, history, rows, basis, _route_budget(unmatched, rest), "target")
    more = _more(shown, len(rows), "routes")
    body = answer + more + unmatched + rest + sections + more
    return body, _verdicts(rows, _chart_window(config))


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
    rows = page_order(view.route_rows())
    fleet_rows = [_fleet_row(row) for row in fleet.fleet[:MAX_FLEET_ROWS]]
    fleet_head = ("route", "window", "replicas", "verdicts", "α (token-weighted)", "tokens where speedup < 1", "tokens")
    aggregates = "<h2>The fleet, per route</h2>" + (
        _table(fleet_head, fleet_rows, left=2) if fleet_rows else "<p>No replica evaluated yet.</p>"
    )
    aggregates += _more(len(fleet_rows), len(fleet.fleet), "fleet rows")
    basis = view_assumptions(view)
    top = prometheus_section(fleet, config, history) + _summary_line(basis) + aggregates
    answer, sections, shown = route_list(view, history, rows, basis, _route_budget(top), "replica")
    more = _more(shown, len(rows), "replica-routes")
    body = top + answer + more + sections + more
    return body, _verdicts(rows, _chart_window(config))


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
    refresh = max(1, math.ceil(config.evaluation_period))  # a new view at each evaluation
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
    evaluates = ""
    if config.evaluation_period != config.poll_interval:
        evaluates = f" · evaluates every {esc(duration(config.evaluation_period))}"
    header = (
        f"<header><h1>specwatch</h1><p class=q>{esc(QUESTION)}</p><p class=meta>{mode} mode · specwatch "
        f"{esc(__version__)} · polls every {esc(duration(config.poll_interval))}{evaluates} · this page refreshes every "
        f"{refresh} s · updated {esc(updated)} · plots: window {esc(_chart_window(config))}, up to the last hour · "
        '<a href="/metrics">/metrics</a> · <a href="/api/v1/status">/api/v1/status</a> · '
        '<a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p></header>'
    )
    return (head + header + banner + body + "</body></html>").encode()
