"""The sidecar logs a state change once, not once per poll (change_log.ChangeLog)."""

from __future__ import annotations

from structlog.testing import capture_logs

from specwatch.serve.change_log import ChangeLog


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
