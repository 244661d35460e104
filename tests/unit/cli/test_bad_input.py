"""Every command refuses bad input the same way: exit 2, one error line naming what is wrong
(`specwatch <cmd>: error: ...`, or `config error:` for a config key) and one hint line, never a
traceback, never argparse's usage block. Run in-process through main(argv)."""

from __future__ import annotations

import socket

import pytest

from specwatch.cli.main import main

K = ["--k", "3", "--batch", "1"]

CASES = {
    # unknown names
    "demo-unknown-scenario": (["demo", "--scenario", "nope"], "--scenario nope"),
    "sim-unknown-scenario": (["sim", "--scenario", "nope", "--crossings"], "nope"),
    "breakeven-unknown-model": (["breakeven", "--model", "lama", *K], "--model"),
    "unknown-command": (["nope"], "invalid choice"),
    # values out of range (zero, negative, above a bound)
    "demo-speed-0": (["demo", "--speed", "0"], "--speed"),
    "demo-port-range": (["demo", "--port", "70000"], "--port"),
    "demo-windows-0": (["demo", "--windows", "0s", "--duration", "1s"], "--windows"),
    "demo-duration-bad": (["demo", "--duration", "soon"], "--duration"),
    "sim-speed-0": (["sim", "--speed", "0"], "--speed"),
    "simulate-requests-0": (["simulate", "--requests", "0"], "--requests"),
    "simulate-tokens-0": (["simulate", "--tokens", "0"], "--tokens"),
    "simulate-jitter-negative": (["simulate", "--jitter", "-1"], "--jitter"),
    "simulate-alpha-above-1": (["simulate", "--alphas", "0.5,1.2"], "[0, 1]"),
    "simulate-itl-contradiction": (["simulate", "--itl-mean-change", "0.5", "--itl-p99-change", "-0.2"], "itl"),
    "simulate-itl-negative-alpha": (["simulate", "--itl-mean-change", "0.5", "--itl-p99-change", "0.1"], "outside"),
    "plan-k-0": (["plan", "--k", "0"], "--k"),
    "plan-concurrency-0": (["plan", "--concurrency", "0"], "--concurrency"),
    "plan-margin-2": (["plan", "--margin", "2"], "--margin"),
    "plan-traffic-sums-to-1.2": (["plan", "--traffic", "a=0.7:0.5,b=0.5:0.3"], "add up to 1.2"),
    "breakeven-params-0": (["breakeven", "--params", "0", *K], "--params"),
    "breakeven-tp-0": (["breakeven", "--tp", "0", *K], "--tp"),
    "breakeven-bandwidth-0": (["breakeven", "--bandwidth", "0", "--flops", "1e15", *K], "--bandwidth"),
    "breakeven-batch-0": (["breakeven", "--k", "3", "--batch", "0"], "--batch"),
    "breakeven-alpha-1.5": (["breakeven", *K, "--alpha", "1.5"], "--alpha"),
    "breakeven-drafts-0": (["breakeven", *K, "--alpha", "0.5", "--drafts", "0"], "--drafts"),
    "breakeven-drafts-nan": (["breakeven", *K, "--alpha", "0.5", "--drafts", "nan"], "--drafts"),
    "breakeven-drafts-without-alpha": (["breakeven", *K, "--drafts", "1000"], "--drafts needs --alpha"),
    "breakeven-engine-unknown": (["breakeven", *K, "--engine", "vlm"], "--engine"),
    "memory-utilization-1.5": (["memory", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    "memory-concurrency-0": (["memory", "--concurrency", "0"], "--concurrency"),
    # files that are not there
    "record-out-missing-dir": (["record", "--out", "/nonexistent/x.jsonl", "--duration", "1s"], "--out"),
    "record-duration-bad": (["record", "--out", "/nonexistent/x.jsonl", "--duration", "soon"], "--duration"),
    "replay-missing": (["replay", "/nonexistent/r.jsonl"], "not found"),
    "check-config-missing": (["check-config", "/nonexistent/c.yaml"], "file not found"),
    "breakeven-model-config-missing": (["breakeven", "--model-config", "/nonexistent.json", *K], "--model-config"),
    # flags that set config keys are named as flags
    "run-listen-bad": (["run", "--listen", "nonsense"], "--listen nonsense"),
    "run-alert-window-bad": (["run", "--alert-window", "soon"], "--alert-window"),
    "check-config-alert-window-bad": (["check-config", "/dev/null", "--alert-window", "soon"], "--alert-window"),
    # missing required flags
    "record-no-out": (["record", "--duration", "1s"], "--out"),
}


def check_refused(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "usage:" not in err, err
    assert len(lines) == 2, err
    command = "specwatch" if argv[0] == "nope" else f"specwatch {argv[0]}"
    assert lines[0].startswith(f"{command}: error: ") or lines[0].startswith(f"{command}: config error: "), err
    assert lines[1] == f"{command}: see '{command} --help'", err
    assert needle in lines[0], err
    assert len(lines[0]) < 400, "one readable line (no 21-model choice list)"
    return lines


@pytest.mark.parametrize(("argv", "needle"), list(CASES.values()), ids=list(CASES))
def test_bad_input_is_two_lines_and_exit_2(argv, needle, capsys):
    check_refused(argv, needle, capsys)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("phases: [{duration: 1m, concurrency: 4, alpha: 2}]", "phases[0].alpha: must be <= 1"),
        ("phases: [{duration: 1m, concurrency: 4, alpha: 0.5}]\nnoise: [", "invalid YAML"),
    ],
    ids=["bad-value", "bad-yaml"],
)
def test_a_bad_scenario_file_is_one_line_naming_the_key_and_exit_2(text, needle, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    check_refused(["sim", "--scenario", str(path), "--crossings"], needle, capsys)


def test_a_busy_port_names_the_flag(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        check_refused(["demo", "--port", str(port), "--duration", "1s"], f"--port {port}", capsys)
        check_refused(["run", "--listen", f"127.0.0.1:{port}", "--target", "http://127.0.0.1:9/m"], "--listen", capsys)


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("SPECWATCH_POLL_INTERVALL", "2s", "did you mean SPECWATCH_POLL_INTERVAL"),
        ("SPECWATCH_POLL_INTERVAL", "soon", "SPECWATCH_POLL_INTERVAL"),
        ("SPECWATCH_TENSOR_PARALLEL", "0", "SPECWATCH_TENSOR_PARALLEL"),
        ("SPECWATCH_HARDWARE", "bogus", "SPECWATCH_HARDWARE: unknown preset 'bogus'"),
        ("SPECWATCH_ROUTES", "chat", "routes cannot be set from the environment"),
        ("SPECWATCH_MODE", "bogus", "SPECWATCH_MODE: 'bogus' is not one of sidecar, standalone, fleet"),
    ],
)
@pytest.mark.parametrize("command", [["check-config", "/dev/null"], ["replay", "/dev/null"]])
def test_environment_variables_are_named(variable, value, needle, command, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    lines = check_refused(command, needle, capsys)
    assert "environment variable" in lines[0]


def test_a_yaml_key_typo_suggests_the_key(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("poll_intervall: 2s\n")
    lines = check_refused(["check-config", str(path)], "did you mean poll_interval?", capsys)
    assert lines[0].startswith("specwatch check-config: config error: poll_intervall")


def test_variables_of_other_tools_with_the_prefix_are_left_alone(monkeypatch, capsys):
    monkeypatch.setenv("SPECWATCH_VLLM_CACHE", "/tmp/x")
    assert main(["check-config", "/dev/null"]) == 0


def test_replay_of_errors_only_exits_1_and_says_why(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"t": 1.0, "target": "vllm", "error": "connect"}\n{"t": 2.0, "target": "vllm", "error": "connect"}\n'
    )
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no evaluations" in err[0]


def test_record_with_the_target_down_exits_1_and_says_why(tmp_path, monkeypatch, capsys):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("SPECWATCH_TARGET_URL", f"http://127.0.0.1:{port}/metrics")
    out = tmp_path / "r.jsonl"
    assert main(["record", "--out", str(out), "--duration", "200ms"]) == 1
    err = capsys.readouterr().err
    assert "nothing recorded" in err and "holds only error lines" in err and "Traceback" not in err


def test_record_in_fleet_mode_is_refused(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text("prometheus: {url: 'http://127.0.0.1:9'}\n")
    check_refused(
        ["record", "--config", str(path), "--out", str(tmp_path / "r.jsonl"), "--duration", "1s"], "fleet", capsys
    )


def test_a_json_variable_that_is_not_json_says_json_is_expected(monkeypatch, capsys):
    monkeypatch.setenv("SPECWATCH_PROMETHEUS__URL", "http://127.0.0.1:9090")
    monkeypatch.setenv("SPECWATCH_PROMETHEUS__HEADERS", "notjson")
    check_refused(["check-config", "/dev/null"], "SPECWATCH_PROMETHEUS__HEADERS: expected a JSON object", capsys)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: {preset: llama-3.1-8b, params: 8e9}\n", "model: give one of model.preset"),
        (
            "routes:\n  - name: a\n  - name: b\n    match: {model_name: x}\n",
            "routes[0].match: required when its target has several routes",
        ),
    ],
    ids=["preset-and-params", "route-without-match-beside-others"],
)
def test_conflicting_config_keys_are_one_line_naming_the_key(text, needle, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    check_refused(["check-config", str(path)], needle, capsys)


def test_a_single_route_without_match_is_a_catch_all_on_purpose(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("routes:\n  - name: everything\n")
    assert main(["check-config", str(path)]) == 0


def test_a_negative_value_reaches_its_own_check_not_argparse(capsys):
    check_refused(["demo", "--duration", "-5s"], "--duration: expected a duration", capsys)
