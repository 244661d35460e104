"""check-config and replay say what the verdicts rest on, beside their usual output."""

from __future__ import annotations

import json
from pathlib import Path

from specwatch.cli.main import main

RECORDING = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu" / "ngram-recording.jsonl"


def test_check_config_prints_ok_then_the_assumed_setup_it_will_rest_on(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("poll_interval: 5s\n")
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}: OK") and out[1] == "verdicts will rest on:"
    assert "  hardware: h100-sxm (ASSUMED)" in out and "  model: llama-3.1-8b (ASSUMED)" in out
    assert any(line.startswith("  engine prior: generic (engine: not configured)") for line in out)
    assert any("hardware and model are ASSUMED" in line for line in out)


def test_check_config_names_only_the_unstated_setting_as_assumed(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("hardware: {preset: h100-sxm}\n")  # the default hardware, stated; no model
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  hardware: h100-sxm (preset)" in out
    assert any(line.startswith("  interval:") and line.endswith(": model is ASSUMED)") for line in out)


def test_check_config_names_the_configured_setup_and_prior(tmp_path, capsys, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("model: {preset: llama-3.1-70b}\ntensor_parallel: 4\nengine: {name: sglang}\n")
    monkeypatch.setenv("SPECWATCH_HARDWARE", "h100-sxm")  # the default, stated
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  hardware: h100-sxm (preset)" in out and "  model: llama-3.1-70b (preset)" in out
    assert "  tensor parallel: 4 (configured)" in out
    assert any(line.startswith("  engine prior: sglang (configured)") and "0.100" in line for line in out)
    assert not any("ASSUMED:" in line for line in out)


def test_check_config_json_is_one_object_with_the_assumptions(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("engine: {name: vllm, version: '0.10'}\n")
    assert main(["check-config", "--json", str(path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    doc = json.loads(line)
    assert doc["ok"] is True and doc["file"] == str(path)
    assert doc["assumptions"]["engine_prior"]["name"] == "vllm-v1"
    assert doc["assumptions"]["engine_prior"]["configured"] is True
    assert doc["assumptions"]["setup"]["assumed"] is True


def test_replay_keeps_stdout_json_and_says_on_stderr_what_each_route_rested_on(capsys):
    assert main(["replay", str(RECORDING)]) == 0
    captured = capsys.readouterr()
    assert all(json.loads(line) for line in captured.out.splitlines())
    err = captured.err.splitlines()
    assert all(line.startswith("specwatch replay: rested on: ") for line in err)
    assert "hardware h100-sxm (ASSUMED)" in err[0]
    routes = [line for line in err if "rested on: route " in line]
    assert len(routes) == 1
    assert "engine vllm detected" in routes[0] and "step time learned" in routes[0]
    # nothing configured: the generic constants stand on the assumed setup, and the line says so
    assert "prior generic (generic: setup assumed)" in routes[0]


def test_replay_quiet_writes_nothing_to_stderr(capsys):
    assert main(["replay", "--quiet", str(RECORDING)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out


def test_replay_prices_a_vllm_v1_payload_with_vllms_prior_when_the_setup_is_stated_and_engine_is_not(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("hardware: {preset: h100-sxm}\nmodel: {preset: llama-3.1-8b}\n")
    assert main(["replay", "--config", str(config), str(RECORDING)]) == 0
    err = capsys.readouterr().err.splitlines()
    (route,) = [line for line in err if "rested on: route " in line]
    assert "engine vllm detected" in route and "prior vllm-v1 (detected)" in route
