"""specwatch against a real llama.cpp server (built from source) running a seeded tiny Llama
with a noisy copy of itself as the draft model (K=4), on loopback.

One module fixture drives a bounded scenario: a warm-up request, a quiet spell, a load phase
of concurrent clients, a quiet spell, while (a) `specwatch run` polls the server live, (b) this
test records the server's /metrics itself every second (the `specwatch record` format) and
(c) a sampler reads the sidecar's /api/v1/status every second. The checks compare specwatch's
numbers with ratios of the server's own counter deltas, read with prometheus_client's parser:

- live: a 30 s window whose oldest and newest polls both fall in the quiet spells spans the whole
  load, so its deltas are the differences of two quiet fetches of ours;
- replay: every window of every evaluation of our recording, load or not, against the deltas
  between the recording's oldest and newest snapshot in that window;
- the verdict's advice, rendered as llama.cpp flags, applied to the server's command line: the
  server starts with it and serves, and drafts as the advice says.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import llamacpp_harness as harness
import load_driver  # the vLLM test's client (on the path through the harness): /v1/completions is the same
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.engines.advice import advise, apply_to_command
from support.loopback import free_port

rv = harness.rv
pytestmark = pytest.mark.realllamacpp

ROUTE = "default"  # llama.cpp's metrics carry no model label
K = 4
W_SHORT, W_MID = "10s", "30s"
WINDOW_SECONDS = {W_SHORT: 10.0, W_MID: 30.0}
QUIET_BEFORE = 22.0  # the 30 s window read after the load starts in this quiet spell
LOAD_SECONDS = 10.0
CONCURRENCY = 4
SETTLE = 2.0  # llama.cpp folds a request's counts in when its slot is released
MIN_DRAFTS = 100
CURRENT = {"spec_draft_n_min": 0}  # the server's speculative flags, in the advice's keys

DRAFTS = "llamacpp:spec_decode_num_drafts_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class Snap:
    """The server's spec-decode counters in one /metrics payload."""

    t: float
    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]

    def minus(self, before: Snap) -> Snap:
        assert len(self.per_pos) == len(before.per_pos), "the per-position series changed shape"
        return Snap(
            self.t - before.t,
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            tuple(a - b for a, b in zip(self.per_pos, before.per_pos, strict=True)),
        )


def parse(t: float, text: str) -> Snap:
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == PER_POS:
                per_pos[int(s.labels["position"])] = s.value
            else:
                values[s.name] = s.value
    positions = tuple(per_pos[i] for i in range(len(per_pos)))
    return Snap(t, values[DRAFTS], values[DRAFT_TOKENS], values[ACCEPTED], positions)


def fetch(url: str) -> Snap:
    return parse(*rv.fetch_metrics(url))


def quiet_fetch(url: str) -> Snap:
    """Two fetches a second apart must agree: the server's counters have stopped moving."""
    a = fetch(url)
    time.sleep(1.0)
    b = fetch(url)
    assert a.minus(b) == Snap(a.t - b.t, 0, 0, 0, (0,) * len(a.per_pos)), "counters still moving"
    return a


def expected(delta: Snap) -> dict:
    """What specwatch must report for a window with these counter deltas (specwatch's definitions:
    alpha = accepted / draft tokens, tau = 1 + accepted / drafts, p_i = accepted at i / drafts)."""
    return {
        "drafts": delta.drafts,
        "acceptance_rate": delta.accepted / delta.draft_tokens,
        "mean_acceptance_length": 1 + delta.accepted / delta.drafts,
        "position_acceptance_rates": [a / delta.drafts for a in delta.per_pos],
    }


def observed(row: dict) -> dict:
    return {
        key: row[key] for key in ("drafts", "acceptance_rate", "mean_acceptance_length", "position_acceptance_rates")
    }


def sidecar_config(metrics_url: str) -> dict:
    # The draft is the target with noise: as large as the target, so a drafted token costs a
    # whole target step.
    return {
        "poll_interval": "1s",
        "windows": [W_SHORT, W_MID],
        "targets": [{"name": "llamacpp", "url": metrics_url, "timeout": "900ms", "engine": "llamacpp"}],
        "model": {"params": 140000, "dtype": "bf16", "layers": 2, "kv_heads": 4, "head_dim": 16},
        "draft": {"method": "draft_model", "k": K, "cost_per_token": 1.0},
        "decision": {"min_drafts": MIN_DRAFTS, "hold": 1},
    }


class StatusSampler:
    """Reads the sidecar's /api/v1/status every second in a thread."""

    def __init__(self, sidecar: rv.Sidecar):
        self.sc = sidecar
        self.rows: list[dict] = []
        self.errors = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)
        self._th.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.rows.append(self.sc.status())
            except Exception:  # noqa: BLE001 - counted; the sidecar must not be down, checked by a test
                self.errors += 1
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._th.join(timeout=20)


@dataclass
class Scenario:
    argv: list[str]
    server: harness.LlamaServer
    sidecar: rv.Sidecar
    config: dict
    recording: Path
    before: Snap  # quiet, after the warm-up
    after: Snap  # quiet, after the load
    t_quiet_before: float  # from here until load_start the counters equal `before`
    load_start: float
    t_quiet_after: float  # from here on the counters equal `after`
    phase: dict
    statuses: list[dict]
    sampler_errors: int


@pytest.fixture(scope="module")
def scenario(llamacpp_env, llamacpp_artifacts) -> Scenario:
    binary, models = llamacpp_env
    argv = harness.server_argv(binary, models, free_port(), K)
    server = harness.start_server(argv, "k4", llamacpp_artifacts)
    sidecar = recorder = sampler = None
    try:
        # A first speculative request, so the per-position counter exists in every snapshot.
        warm = load_driver.one_request(server.base, harness.SERVED_NAME, _request(0), 60)
        assert warm["error"] is None, warm["error"]
        time.sleep(SETTLE)
        config = sidecar_config(server.metrics_url)
        recording = llamacpp_artifacts / "llamacpp-recording.jsonl"
        recording.unlink(missing_ok=True)
        recorder = rv.Recorder(server.metrics_url, "llamacpp", recording).start()
        sidecar = rv.start_sidecar(config, llamacpp_artifacts, "llamacpp")
        sampler = StatusSampler(sidecar)
        t_quiet_before = time.time()
        time.sleep(QUIET_BEFORE)
        before = quiet_fetch(server.metrics_url)
        load_start = time.time()
        phase = load_driver.run_phase(
            server.base, harness.SERVED_NAME, CONCURRENCY, LOAD_SECONDS, 100000, 11, 0.5, 16, 48, 60
        )
        assert phase["errors"] == 0, phase["first_error"]
        time.sleep(SETTLE)
        t_quiet_after = time.time()
        after = quiet_fetch(server.metrics_url)
        time.sleep(max(0.0, load_start + WINDOW_SECONDS[W_MID] - time.time()))
    finally:
        for stop in (sampler, recorder, sidecar):
            if stop is not None:
                stop.stop()
        server.stop()
    return Scenario(
        argv,
        server,
        sidecar,
        config,
        recording,
        before,
        after,
        t_quiet_before,
        load_start,
        t_quiet_after,
        phase,
        list(sampler.rows),
        sampler.errors,
    )


def _request(seed: int) -> dict:
    return load_driver.make_request(seed, 0.5, 16, 48)


def _route_window(status: dict, window: str) -> dict | None:
    for route in status.get("routes", []):
        if route.get("route") == ROUTE:
            return route["windows"].get(window)
    return None


def spanning_rows(sc: Scenario) -> list[dict]:
    """The 30 s window rows whose oldest poll lies in the quiet spell before the load and whose
    newest lies after it: their deltas are after - before."""
    rows = []
    width = WINDOW_SECONDS[W_MID]
    for status in sc.statuses:
        t = status["t"]
        if t >= sc.t_quiet_after and sc.t_quiet_before <= t - width and t - width + 1.0 < sc.load_start - 0.5:
            row = _route_window(status, W_MID)
            if row is not None:
                rows.append(row)
    return rows


def test_the_load_drafts_and_the_draft_is_accepted_sometimes_not_always(scenario):
    delta = scenario.after.minus(scenario.before)
    assert delta.drafts >= MIN_DRAFTS, delta
    assert 0 < delta.accepted < delta.draft_tokens, delta
    assert len(delta.per_pos) == K
    # every draft is K long (no probability cut-off) but where the generation ends first
    assert delta.draft_tokens <= K * delta.drafts


def test_the_sidecar_stayed_up_and_read_the_llamacpp_schema(scenario):
    assert scenario.sampler_errors == 0
    last = scenario.statuses[-1]
    (target,) = last["targets"]
    assert target["up"] is True and not any(target["errors"].values()), target
    route = next(r for r in last["routes"] if r["route"] == ROUTE)
    assert route["spec_present"] is True


def test_a_window_spanning_the_load_equals_the_servers_counter_deltas_exactly(scenario):
    rows = spanning_rows(scenario)
    assert rows, "no 30 s window had both ends in the quiet spells"
    want = expected(scenario.after.minus(scenario.before))
    for row in rows:
        assert observed(row) == want


def test_every_replayed_window_equals_the_recordings_counter_deltas_exactly(scenario, llamacpp_artifacts):
    snaps = [parse(rec["t"], rec["text"]) for rec in map(json.loads, scenario.recording.read_text().splitlines())]
    lines = rv.replay(scenario.config, scenario.recording, llamacpp_artifacts)
    checked = mid_load = 0
    for line in lines:
        if line.get("route") != ROUTE or line["window"] not in WINDOW_SECONDS:
            continue
        start = line["t"] - WINDOW_SECONDS[line["window"]]
        inside = [s for s in snaps if start <= s.t <= line["t"]]
        delta = inside[-1].minus(inside[0])
        assert line["drafts"] == delta.drafts, f"window {line['window']} at {line['t']}"
        if delta.drafts < MIN_DRAFTS:  # below the sample guard every ratio is absent
            assert line["acceptance_rate"] is None and line["mean_acceptance_length"] is None
            continue
        want = expected(delta)
        want.pop("position_acceptance_rates")  # a replay line carries no p_i
        got = {key: line[key] for key in want}
        assert got == want, f"window {line['window']} at {line['t']}"
        checked += 1
        mid_load += scenario.load_start < line["t"] < scenario.t_quiet_after
    assert checked >= 10 and mid_load >= 3, (checked, mid_load)


def test_a_verdict_is_produced_for_the_loaded_window(scenario):
    row = spanning_rows(scenario)[-1]
    assert row["drafts"] >= MIN_DRAFTS
    assert row["verdict"] in ("keep", "shorten", "disable"), row


@dataclass(frozen=True)
class Assessed:
    """An assessment as the advice reads it (engines/advice.Assessed)."""

    candidate: str
    action: str | None
    recommended_draft_length: int | None
    recommended_config: dict | None
    config_changes: dict | None


def assessed_of(row: dict) -> Assessed:
    """The sidecar's verdict for a llama.cpp route, as its status shows it."""
    return Assessed(row["verdict"], row["recommended_action"], row["recommended_draft_length"], None, None)


def restart_with(sc: Scenario, advice, tag: str, artifacts: Path) -> Snap:
    """The server's command line with the advice applied, on a new port: it must start, serve a
    request and export its counters; returns them after that request."""
    argv = apply_to_command(sc.argv, advice)
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    server = harness.start_server(argv, tag, artifacts)
    try:
        res = load_driver.one_request(server.base, harness.SERVED_NAME, _request(1), 60)
        assert res["error"] is None, res["error"]
        time.sleep(SETTLE)
        text = rv.fetch_metrics(server.metrics_url)[1]
    finally:
        server.stop()
    values = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    positions = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == PER_POS]
    return Snap(
        0.0,
        values[DRAFTS].value,
        values[DRAFT_TOKENS].value,
        values[ACCEPTED].value,
        tuple(s.value for s in positions),
    )


def check_restart(snap: Snap, k: int) -> None:
    if k == 0:
        assert snap.drafts == 0 and snap.per_pos == (), snap
    else:
        assert snap.drafts > 0 and len(snap.per_pos) == k and snap.draft_tokens <= k * snap.drafts, snap


def test_the_verdicts_advice_as_llamacpp_flags_is_accepted_by_the_server(scenario, llamacpp_artifacts):
    row = spanning_rows(scenario)[-1]
    advice = advise(assessed_of(row), "llamacpp")
    assert advice is not None and advice.engine == "llamacpp"
    # the advice the sidecar shows is this one, in llama.cpp's terms
    assert (row["recommended_command"], row["recommended_flags"]) == (advice.command, list(advice.flags) or None)
    k = {"keep": K, "disable": 0}.get(advice.action, row["recommended_draft_length"])
    check_restart(restart_with(scenario, advice, f"advice-{advice.action}", llamacpp_artifacts), k)


@pytest.mark.parametrize(
    ("action", "k"),
    [("keep", K), ("shorten", 2), ("disable", 0)],
)
def test_each_kind_of_advice_is_a_command_line_the_server_accepts(scenario, llamacpp_artifacts, action, k):
    changes = {"num_speculative_tokens": k} if action == "shorten" else None
    verdict_action = {"keep": "no_change", "shorten": "apply", "disable": "remove_speculative_config"}[action]
    advice = advise(Assessed(action, verdict_action, k or None, None, changes), "llamacpp", CURRENT)
    assert advice is not None and advice.action == action
    check_restart(restart_with(scenario, advice, f"{action}-{k}", llamacpp_artifacts), k)
