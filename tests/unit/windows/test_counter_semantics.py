"""Counter semantics (docs/architecture.md §3): a dip is not a restart, a restart still is, and the
mirrored counters never go down. The expected values are worked out by hand or from a recording
without the dips, not from specwatch."""

import json
import math
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.engines.series import SeriesKey
from specwatch.export.collector import registry_for
from specwatch.serve.service import Service
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot
from support.vllm_payloads import FakeVllm

D = SeriesKey("drafts", "0")
S = SeriesKey("itl_sum", "0")
C = SeriesKey("itl_count", "0")
H = SeriesKey("itl", "0")  # the ITL histogram's reset group (its _created)


def bucket(le, engine="0"):
    return SeriesKey("itl_bucket", engine, le)


def feed(window, values, key=D, created=None):
    resets = []
    for i, v in enumerate(values):
        resets.append(
            window.ingest(route_snapshot(float(i), {key: float(v)}, {key: created} if created is not None else None))
        )
    return resets


# -- a dip is not a restart --------------------------------------------------------------------
F, T = False, True


@pytest.mark.parametrize(
    ("values", "created", "restarts", "increase", "resets", "dips"),
    [
        # 100 -> 105: not 0 + 6 (base 99) nor 99 + 6 (a restart).
        pytest.param([100, 99, 105], 1000.0, [F, F, F], 5, 0, 1, id="a-dip-with-the-same-created-adds-nothing"),
        # 10 is held back; 500 is below the base again but on from 10: the engine went backwards at
        # 10 and counts on from there, 490 + 700, instead of nothing until it passes 1000 again.
        pytest.param(
            [1000, 10, 500, 1200], 1000.0, [F, F, F, F], 1190, 0, 2, id="any-drop-with-the-same-created-is-a-dip"
        ),
        # 1 count; 0.05 % of a million.
        pytest.param(
            [10, 9, 12, 1_000_000, 999_500, 1_000_100],
            None,
            [F, F, F, F, F, F],
            2 + 999_988 + 100,
            0,
            2,
            id="without-created-a-one-count-and-a-tiny-relative-dip-are-clamped",
        ),
        # 2 counts below 10: beyond one count and 0.1 %.
        pytest.param([10, 8], None, [F, T], 8, 1, 0, id="without-created-a-drop-of-two-counts-is-a-restart"),
        # 0.3 % below: a restart that counted 997,000.
        pytest.param(
            [1_000_000, 997_000],
            None,
            [F, T],
            997_000,
            1,
            0,
            id="without-created-a-relative-drop-beyond-noise-is-a-restart",
        ),
        pytest.param([100, 99.5, 3], None, [F, F, T], 3, 1, 1, id="a-restart-after-a-dip-counts-from-zero"),
    ],
)
def test_a_counter_is_counted_across_dips_and_restarts(values, created, restarts, increase, resets, dips):
    w = RouteWindow(600)
    assert feed(w, values, created=created) == restarts
    assert w.view(len(values) - 1, 600).increase(D) == increase
    assert (w.resets, w.dips) == (resets, dips)
    assert w.mirror[("drafts", None)] == increase  # the route's count since its first poll


def test_a_changed_created_is_still_a_restart_whatever_the_value():
    w = RouteWindow(600)
    w.ingest(route_snapshot(0, {D: 100.0}, {D: 1.0}))
    w.ingest(route_snapshot(5, {D: 99.0}, {D: 2.0}))  # one below, but a new process: it counted 99
    assert w.view(5, 600).increase(D) == 99
    assert (w.resets, w.dips) == (1, 0)


def test_without_created_an_ulp_dip_of_the_itl_sum_leaves_the_histogram_alone():
    w = RouteWindow(600)
    base = {bucket(0.01): 5.0, bucket(math.inf): 10.0, C: 10.0, S: 0.3}
    w.ingest(route_snapshot(0, base))
    w.ingest(route_snapshot(5, {**base, S: math.nextafter(0.3, 0.0)}))  # summation order moved it one ULP
    w.ingest(route_snapshot(10, {bucket(0.01): 6.0, bucket(math.inf): 12.0, C: 12.0, S: 0.35}))
    view = w.view(10, 600)
    assert view.increase(C) == 2 and view.increase(bucket(math.inf)) == 2
    assert view.increase(S) == pytest.approx(0.05)
    assert (w.resets, w.dips) == (0, 1)
    # The same _sum drop beyond noise resets the whole histogram (Prometheus's rule, as a whole).
    w2 = RouteWindow(600)
    w2.ingest(route_snapshot(0, base))
    assert w2.ingest(route_snapshot(5, {**base, S: 0.1}))
    assert w2.view(5, 600).increase(C) == 10


def test_with_created_a_1e6_dip_of_the_itl_sum_is_clamped_and_a_new_created_resets_the_histogram():
    w = RouteWindow(600)
    base = {bucket(math.inf): 10.0, C: 10.0, S: 0.3}
    w.ingest(route_snapshot(0, base, {H: 1.0}))
    assert not w.ingest(route_snapshot(5, {**base, S: 0.3 - 1e-6}, {H: 1.0}))
    assert w.ingest(route_snapshot(10, {bucket(math.inf): 3.0, C: 3.0, S: 0.1}, {H: 2.0}))
    assert w.view(10, 600).increase(C) == 3


# -- the route's mirrors ------------------------------------------------------------------------
def test_the_route_mirror_keeps_a_departed_engines_contribution():
    w = RouteWindow(600)
    e0, e1 = SeriesKey("drafts", "0"), SeriesKey("drafts", "1")
    w.ingest(route_snapshot(0, {e0: 10.0, e1: 100.0, bucket(math.inf, "1"): 5.0}))
    w.ingest(route_snapshot(5, {e0: 20.0, e1: 150.0, bucket(math.inf, "1"): 9.0}))
    w.ingest(route_snapshot(10, {e0: 30.0}))  # engine 1 scaled down
    assert w.mirror[("drafts", None)] == 20 + 50
    assert w.mirror[("itl_bucket", math.inf)] == 4
    w.ingest(route_snapshot(15, {e0: 40.0, e1: 7.0}))  # a new engine 1: counted from its first sighting
    assert w.mirror[("drafts", None)] == 80


def test_a_bucket_bound_new_to_the_route_starts_at_the_next_lower_bound_so_buckets_stay_cumulative():
    w = RouteWindow(600)
    old = {bucket(0.01): 50.0, bucket(0.025): 80.0, bucket(math.inf): 100.0, C: 100.0, S: 2.0}
    w.ingest(route_snapshot(0, dict.fromkeys(old, 0.0), {H: 1.0}))
    w.ingest(route_snapshot(5, old, {H: 1.0}))
    new = {bucket(0.01): 1.0, bucket(0.02): 2.0, bucket(0.025): 2.0, bucket(math.inf): 3.0, C: 3.0, S: 0.1}
    w.ingest(route_snapshot(10, new, {H: 2.0}))  # vLLM upgraded: another layout
    m = {le: w.mirror[("itl_bucket", le)] for le in (0.01, 0.02, 0.025, math.inf)}
    assert m == {0.01: 51.0, 0.02: 52.0, 0.025: 82.0, math.inf: 103.0}
    assert list(m.values()) == sorted(m.values())


# -- replay: dips leave alpha and the verdicts as they were -----------------------------------------
POLL = 5.0
CONFIG = {
    "poll_interval": "5s",
    "windows": ["30s", "1m"],
    "decision": {"min_drafts": 100, "hold": 2},
    "model": {"preset": "llama-3.1-8b"},
    "hardware": {"preset": "h100-sxm"},
}
PATTERN = [4, 4, 3, 3, 2]  # 16 of 20 draft tokens accepted: alpha 0.80 (K=4)
SAMPLE = re.compile(r"^(?P<name>[^{\s]+)(?P<labels>\{[^}]*\})? (?P<value>\S+)$")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


#: Which samples dip: all of vLLM's counters and histograms, or the draft tokens and the ITL sums only
#: (the case that hurt most: a restart read there counts lifetime draft tokens against one poll's
#: accepted tokens, so alpha collapses).
DIPPING = {
    "all": lambda name: True,
    "draft-tokens+itl-sum": lambda name: (
        name in ("vllm:spec_decode_num_draft_tokens_total", "vllm:inter_token_latency_seconds_sum")
    ),
}


def dipped(text, counts, seconds, which="all"):
    """The payload with every vLLM counter and histogram sample `counts` lower (never below 0), the ITL
    `_sum`s by `seconds(value)`; `_created` untouched. Equal steps keep the buckets cumulative."""
    out = []
    dips = DIPPING[which]
    for line in text.split("\n"):
        m = SAMPLE.match(line)
        name = m["name"] if m else ""
        if not m or not name.startswith("vllm:") or name.endswith("_created") or name in GAUGES or not dips(name):
            out.append(line)
            continue
        value = float(m["value"])
        if name.endswith("_seconds_sum"):
            value = max(0.0, value - seconds(value))
        elif value >= counts:
            value -= counts
        out.append(f"{name}{m['labels'] or ''} {value!r}")
    return "\n".join(out)


def without_created(text):
    return "\n".join(line for line in text.split("\n") if not re.match(r"^(# \w+ )?\S+_created\b", line))


def recordings(*, created, dip_counts, restart_at=None, polls=48, which="all"):
    """Two recordings of one server (2 DP engines, alpha 0.80), alike but for the dips: every 4th poll
    comes after an idle interval, and in the second recording its counters read dipped."""
    fake = FakeVllm(engines=2)
    for _ in range(30):  # a server that ran before the sidecar: lifetime values are large
        for e in (0, 1):
            fake.step(e, batch=10, accepted_per_request=PATTERN, itl_seconds=0.02)
    plain, dips = [], []
    seconds = (lambda v: 1e-6) if created else (lambda v: v - math.nextafter(v, 0.0))
    for i in range(polls):
        if i == restart_at:
            fake.restart()
        idle = i % 4 == 3
        if not idle:
            for _ in range(10):
                for e in (0, 1):
                    fake.step(e, batch=10, accepted_per_request=PATTERN, itl_seconds=0.02)
        text = fake.text() if created else without_created(fake.text())
        t = 1000.0 + POLL * i
        plain.append(json.dumps({"t": t, "target": "vllm", "text": text}))
        dip_text = dipped(text, dip_counts, seconds, which) if idle and i != restart_at else text
        dips.append(json.dumps({"t": t, "target": "vllm", "text": dip_text}))
    return plain, dips


def run(lines):
    pipeline = Pipeline(from_mapping(CONFIG))
    out = list(replay(from_mapping(CONFIG), lines, pipeline))
    return out, pipeline.state().targets[0]


@pytest.mark.parametrize("which", sorted(DIPPING))
@pytest.mark.parametrize("created", [True, False], ids=["created", "no-created"])
@pytest.mark.parametrize("dip_counts", [1.0, 0.5], ids=["one-token", "sub-token"])
def test_dips_with_created_unchanged_leave_alpha_and_verdicts_as_without_them(created, dip_counts, which):
    """Before: every dipped poll was a restart (12 counted) and 90 of 94 evaluations changed; with only
    the draft tokens and ITL sums dipping alpha read down to 0.041 and 72 verdicts went keep -> disable."""
    plain, dips = recordings(created=created, dip_counts=dip_counts, which=which)
    base, base_target = run(plain)
    with_dips, target = run(dips)
    assert len(base) == len(with_dips) > 80
    verdicts = [r["verdict"] for r in base]
    assert "keep" in verdicts
    changed = 0
    for a, b in zip(base, with_dips, strict=True):
        assert (a["t"], a["window"]) == (b["t"], b["window"])
        assert a["verdict"] == b["verdict"], (a, b)
        if a["acceptance_rate"] is not None:
            assert b["acceptance_rate"] == pytest.approx(a["acceptance_rate"], rel=0.01)
            assert a["acceptance_rate"] == pytest.approx(0.8, rel=0.01)
        changed += a != b
    assert changed == 0  # exactly the same: a dip adds 0 and its recovery is counted from the old base
    assert (base_target.resets, target.resets) == (0, 0)
    assert (base_target.dips, target.dips) == (0, 12)  # one per dipped poll, however many series dipped


@pytest.mark.parametrize("created", [True, False], ids=["created", "no-created"])
def test_a_real_restart_among_the_dips_is_still_detected_and_counted(created):
    plain, dips = recordings(created=created, dip_counts=1.0, restart_at=26, which="draft-tokens+itl-sum")
    base, _ = run(plain)
    with_dips, target = run(dips)
    assert target.resets == 1
    for a, b in zip(base, with_dips, strict=True):
        assert a["verdict"] == b["verdict"]
        if b["acceptance_rate"] is not None:
            assert b["acceptance_rate"] == pytest.approx(0.8, rel=0.01)


def test_the_dips_are_exported_as_specwatch_target_dips_total():
    _, dips = recordings(created=True, dip_counts=1.0, polls=8)
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), dips, pipeline))
    text = _render(pipeline)
    assert _value(text, "specwatch_target_dips_total", target="vllm") == 2
    assert _value(text, "specwatch_target_restarts_total", target="vllm") == 0


def _render(pipeline):
    from prometheus_client import generate_latest

    return generate_latest(registry_for(pipeline.view)).decode()


def _value(text, name, **labels):
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


# -- a reload that rebuilds the pipeline ----------------------------------------------------------
def test_a_reload_that_rebuilds_the_pipeline_carries_the_mirrors_and_their_bases():
    fake = FakeVllm(engines=2)
    service = Service(from_mapping(CONFIG))
    try:
        t = 1000.0
        drafts = []
        for windows in (["30s", "1m"], ["1m", "5m"], ["30s", "1m"]):
            if windows != service.config.windows:
                service.apply(from_mapping({**CONFIG, "windows": windows}))
            for _ in range(6):
                for e in (0, 1):
                    fake.step(e, batch=10, accepted_per_request=PATTERN, itl_seconds=0.02)
                t += POLL
                assert service.poller.pipeline.ingest("vllm", t, fake.text()).ok
                service.poller.pipeline.evaluate(t)
                drafts.append(_value(_render(service.poller.pipeline), "specwatch_drafts_total", route="m"))
        assert drafts == sorted(drafts)
        # Same target URL and routes: the bases are kept, so no poll is lost over the two reloads.
        assert drafts[-1] == 17 * 2 * 10
    finally:
        service.stop()
