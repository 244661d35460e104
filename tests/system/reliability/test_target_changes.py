"""vLLM changing under the sidecar: restarts, schema drift, DP engines, spec off/on.

These are not failed polls: every poll succeeds, and the point is that the windows never produce
a negative delta, a ratio outside [0, 1] or a verdict the traffic does not justify.
"""

from __future__ import annotations

from pathlib import Path

from specwatch.base.logsetup import capture_logs
from support.decidable import decidable_verdict

from .harness import TARGET, Sidecar, new_pair, value

HERE = Path(__file__).parent
MIRRORED = (
    "specwatch_drafts_total",
    "specwatch_draft_tokens_total",
    "specwatch_accepted_tokens_total",
    "specwatch_generation_tokens_total",
)


def check_sane(car: Sidecar, metrics: dict) -> None:
    """No negative window delta and no ratio outside its range, on every window."""
    for (name, labels), v in metrics.items():
        if name in ("specwatch_acceptance_ratio", "specwatch_position_acceptance_ratio"):
            assert 0.0 <= v <= 1.0, (name, labels, v)
        if name == "specwatch_window_drafts":
            assert v >= 0, (name, labels, v)
        if name == "specwatch_mean_acceptance_length_tokens":
            assert v >= 1.0, (name, labels, v)
    for route in car.service.poller.pipeline._routes.values():
        for view in (route.window.view(car.sim.epoch + car.sim_t, w) for w in car.config.windows):
            if view is not None:
                assert all(d >= 0 for d in view.increases().values())


def mirrored(metrics: dict) -> dict:
    return {(n, lab): v for (n, lab), v in metrics.items() if n in MIRRORED}


def test_vllm_restart_mid_window_no_negative_delta_no_verdict_change_and_one_restart_counted():
    server, car = new_pair()
    try:
        car.poll(14)  # 70 s: the 1m window is full, the 5m window is partly full
        before = car.scrape()
        verdicts = car.verdicts()
        assert set(verdicts.values()) == {"keep"}
        assert value(before, "specwatch_target_restarts_total", target=TARGET) == 0
        car.sim.restart(car.sim_t)  # counters back to 0, new _created timestamps
        with capture_logs() as logs:
            for _ in range(14):
                car.poll()
                metrics = car.scrape()
                check_sane(car, metrics)
                for key, v in mirrored(metrics).items():
                    assert v >= before.get(key, 0.0), f"mirrored counter went down across the restart: {key}"
                for label in ("1m", "5m"):
                    assert 0.7 < value(metrics, "specwatch_acceptance_ratio", window=label) < 0.9
        assert not [e for e in logs if e["event"] == "verdict_changed"]
        assert car.verdicts() == verdicts
        assert value(car.scrape(), "specwatch_target_restarts_total", target=TARGET) == 1
        assert [e for e in logs if e["event"] == "counter_reset"]
    finally:
        car.close()
        server.stop()


def test_schema_drift_v1_legacy_itl_v0_spec_off_and_back_only_changes_the_verdict_when_speculation_does():
    server, car = new_pair(scenario="schema-drift")
    try:
        schemas, changes = [], []
        with capture_logs() as logs:
            for _ in range(int(car.scenario.duration // 5)):
                car.poll()
                metrics = car.scrape()
                assert value(metrics, "specwatch_target_up", target=TARGET) == 1.0
                assert sum(v for (n, _), v in metrics.items() if n == "specwatch_scrape_errors_total") == 0
                check_sane(car, metrics)
                info = [dict(lab) for (n, lab) in metrics if n == "specwatch_route_info"]
                if info and (not schemas or schemas[-1] != info[0]["schema"]):
                    schemas.append(info[0]["schema"])
        changes = [(e["window"], e["verdict"]) for e in logs if e["event"] == "verdict_changed"]
        # While speculation is off, a V0 server without its spec gauges reads as legacy-ITL V1: fine.
        assert schemas[:3] == ["v1", "v1-legacy-itl", "v0"] and schemas[-1] == "v1", schemas
        # Per window: first verdict, then spec_off at 360 s, then back on. Nothing else.
        for label in ("1m", "5m"):
            mine = [v for w, v in changes if w == label]
            assert mine[0] in ("keep", "insufficient_data")
            assert [v for v in mine if v != "insufficient_data"] == ["keep", "spec_off", "keep"], (label, mine)
        restarts = value(car.scrape(), "specwatch_target_restarts_total", target=TARGET)
        assert restarts == 4, restarts  # 120 s, 240 s, 360 s, 420 s (spec_on and schema at once)
    finally:
        car.close()
        server.stop()


def _hide_engine(text: str, engine: str) -> str:
    return "\n".join(line for line in text.split("\n") if f'engine="{engine}"' not in line)


def test_dp_engines_appearing_and_disappearing_never_move_the_verdict_or_the_ratios():
    server, car = new_pair(scenario=str(HERE / "dp2-steady.yaml"))
    try:
        car.poll(12)
        verdicts = car.verdicts()
        truth = car.sim.truth()["routes"]["llama-8b"]
        assert set(verdicts.values()) == {decidable_verdict(car.config)(truth)}, (verdicts, truth)
        before = car.scrape()
        with capture_logs() as logs:
            for hidden in ("1", None, "0", None, "1", "1", "1", None):
                server.set(car.mutated(lambda t, h=hidden: _hide_engine(t, h) if h else t))
                car.poll()
                metrics = car.scrape()
                assert value(metrics, "specwatch_target_up", target=TARGET) == 1.0
                check_sane(car, metrics)
                for key, v in mirrored(metrics).items():
                    assert v >= before.get(key, 0.0), key
                before = metrics
        assert not [e for e in logs if e["event"] == "verdict_changed"], logs
        assert car.verdicts() == verdicts
        assert value(car.scrape(), "specwatch_target_restarts_total", target=TARGET) == 0
    finally:
        car.close()
        server.stop()


def test_route_label_set_vanishing_is_dropped_after_the_ttl_and_output_cardinality_stays_bounded():
    server, car = new_pair(route_ttl_polls=3)
    try:
        car.poll(4)
        base = len(car.scrape())
        # Each poll, the model is renamed: a new route appears, the old one vanishes.
        sizes = []
        for i in range(12):
            server.set(car.mutated(lambda t, i=i: t.replace('model_name="llama-70b"', f'model_name="m{i}"')))
            car.poll()
            sizes.append(len(car.service.poller.pipeline._routes))
        assert max(sizes) <= 1 + 3, sizes  # the live route plus at most ttl vanished ones
        assert len(car.scrape()) <= base * 4
    finally:
        car.close()
        server.stop()


def test_multiprocess_vllm_restarts_without_created_keep_ratios_sane_and_verdict_steady():
    """--api-server-count > 1: no _created (V11). Restarts must still be seen and never make alpha > 1."""
    server, car = new_pair(scenario=str(HERE / "mp-restart.yaml"))
    try:
        assert "_created" not in car.render()
        car.poll(12)
        truth = car.sim.truth()["routes"]["llama-8b"]
        verdicts = car.verdicts()
        assert set(verdicts.values()) == {decidable_verdict(car.config)(truth)}, (verdicts, truth)
        with capture_logs() as logs:
            while car.sim_t < car.scenario.duration:
                car.poll()
                metrics = car.scrape()
                check_sane(car, metrics)
                for label in ("1m", "5m"):
                    alpha = value(metrics, "specwatch_acceptance_ratio", window=label)
                    true_alpha = car.sim.truth()["routes"]["llama-8b"]["alpha"]
                    assert alpha is None or abs(alpha - true_alpha) < 0.08, (car.sim_t, label, alpha, true_alpha)
        assert not [e for e in logs if e["event"] == "verdict_changed"], logs
        assert value(car.scrape(), "specwatch_target_restarts_total", target=TARGET) == 2
    finally:
        car.close()
        server.stop()
