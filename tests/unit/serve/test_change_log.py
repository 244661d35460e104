"""The sidecar logs a state change once, not once per poll (change_log.ChangeLog)."""

from __future__ import annotations

from specwatch.base.logsetup import capture_logs
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view.change_log import ChangeLog
from specwatch.windows.derive import WindowStats


def test_a_repeated_state_is_logged_once_and_a_change_again():
    changes = ChangeLog()
    with capture_logs() as logs:
        for _ in range(3):
            changes.target_down("vllm", "target_down", "timeout", "deadline of 1s")
        changes.info(("target", "vllm"), ("up",), "target_up", target="vllm")
        changes.target_down("vllm", "target_down", "timeout", "x" * 500)
    assert [entry["event"] for entry in logs] == ["target_down", "target_up", "target_down"]
    assert [entry["log_level"] for entry in logs] == ["warning", "info", "warning"]  # down is worth a look
    assert len(logs[-1]["error"]) == 200  # a long error is cut, never a whole payload


def test_forgetting_every_key_past_the_limit_only_repeats_a_line():
    changes = ChangeLog()
    changes.LIMIT = 3
    assert changes.changed(("route", "a"), 1)
    for i in range(4):
        changes.changed(("route", str(i)), 1)
    assert changes.changed(("route", "a"), 1)  # forgotten with the rest: logged again
    assert len(changes._last) <= changes.LIMIT + 1


def test_a_verdict_change_logs_the_advice_in_the_routes_engine_terms():
    advice = Assessment(
        "shorten", recommended_draft_length=2, config_changes={"num_speculative_tokens": 2}, action="merge"
    )
    for engine, config, command in (
        ("vllm", None, 'merge into your --speculative-config: {"num_speculative_tokens":2}'),
        ("llamacpp", None, "--spec-draft-n-max 2"),
    ):
        stats = WindowStats(
            route="chat", window="1m", t=0.0, samples=3, span_seconds=60.0, spec_present=True, engine=engine
        )
        evaluation = RouteEvaluation(stats, advice, "shorten", True, advice=advice)
        with capture_logs() as logs:
            ChangeLog().verdict(("verdict", "chat", "1m"), evaluation)
        assert logs[0]["recommended_command"] == command
        assert logs[0]["recommended_config"] == config
