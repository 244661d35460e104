"""Config: defaults, durations and sizes, env overrides, and errors that name the key (exit 2)."""

import subprocess
import sys

import pytest

from specwatch.config import ConfigError, from_mapping, load, parse_duration, parse_size


def test_defaults_match_the_design():
    c = from_mapping({}, environ={})
    assert c.listen == ":9474" and c.poll_interval == 5.0 and c.window_labels == ("1m", "5m")
    assert c.targets[0].url == "http://127.0.0.1:8000/metrics" and c.targets[0].timeout == 2.0
    assert c.targets[0].max_bytes == 16 * 2**20
    assert (c.decision.min_drafts, c.decision.margin, c.decision.hold) == (500, 0.02, 2)


@pytest.mark.parametrize("text, seconds", [("500ms", 0.5), ("5s", 5), ("1m", 60), ("2h", 7200), (3, 3.0), ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text, "k") == seconds


@pytest.mark.parametrize("text, size", [("16MiB", 16 * 2**20), ("500KB", 500_000), (1024, 1024), ("2GiB", 2 * 2**30)])
def test_sizes(text, size):
    assert parse_size(text, "k") == size


@pytest.mark.parametrize("raw, key", [
    ({"targets": [{"timeout": "forever"}]}, "targets[0].timeout"),
    ({"targets": [{"url": "file:///etc/passwd"}]}, "targets[0].url"),
    ({"targets": [{"timeout": "10s"}]}, "targets[0].timeout"),          # must be < poll_interval
    ({"targets": [{"max_bytes": "lots"}]}, "targets[0].max_bytes"),
    ({"targets": [{"bogus": 1}]}, "targets[0].bogus"),
    ({"pol_interval": "5s"}, "pol_interval"),
    ({"windows": ["1m", "nope"]}, "windows[1]"),
    ({"windows": ["5s"]}, "windows[0]"),                                 # shorter than 2 polls
    ({"decision": {"min_drafts": -1}}, "decision.min_drafts"),
    ({"decision": {"margin": "x"}}, "decision.margin"),
    ({"hardware": "tpu-v9"}, "hardware"),
    ({"model": {"preset": "gpt-9"}}, "model.preset"),
    ({"model": {"config_json": "/nonexistent/config.json"}}, "model.config_json"),
    ({"model": {"dtype": "fp4"}}, "model.dtype"),
    ({"draft": {"method": "magic"}}, "draft.method"),
    ({"routes": [{"name": "a", "target": "nope"}]}, "routes[0].target"),
    ({"routes": [{"name": "a", "match": {"pod": "x"}}]}, "routes[0].match.pod"),
    ({"listen": "nowhere"}, "listen"),
    ({"profile": "/nonexistent/profile.yaml"}, "profile"),
    ({"decision": {"hold": float("inf")}}, "decision.hold"),
    ({"decision": {"margin": float("nan")}}, "decision.margin"),
    ({"model": {"params": float("inf")}}, "model.params"),
    ({"hardware": {"preset": "h100-sxm", "flops": float("inf")}}, "hardware.flops"),
    ({"draft": {"cost_per_token": 10}}, "draft.cost_per_token"),
    ({"targets": [{"headers": {"Authorization": "Bearer ${SPECWATCH_TEST_UNSET_TOKEN}"}}]}, "targets[0].headers.Authorization"),
])
def test_bad_values_raise_one_error_naming_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        from_mapping(raw, environ={})
    assert str(info.value).startswith(key + ":"), str(info.value)


def test_environment_overrides_file_values_and_header_values_come_from_env():
    c = from_mapping({"poll_interval": "5s", "targets": [{"headers": {"Authorization": "Bearer ${TOKEN}"}}]},
                     environ={"SPECWATCH_POLL_INTERVAL": "10s", "SPECWATCH_DECISION__MIN_DRAFTS": "1000",
                              "SPECWATCH_TARGET_URL": "http://10.0.0.1:8000/metrics", "TOKEN": "s3cret",
                              "SPECWATCH_WINDOWS": "30s,2m"})
    assert c.poll_interval == 10.0 and c.decision.min_drafts == 1000
    assert c.targets[0].url == "http://10.0.0.1:8000/metrics"
    assert c.targets[0].headers["Authorization"] == "Bearer s3cret"
    assert c.window_labels == ("30s", "2m")


def test_check_config_exits_2_with_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  - url: http://127.0.0.1:8000/metrics\n    timeout: soon\n")
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "check-config", str(bad)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "targets[0].timeout" in proc.stderr


def test_check_config_accepts_the_documented_example(tmp_path):
    model = tmp_path / "config.json"
    model.write_text('{"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,'
                     ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}')
    good = tmp_path / "good.yaml"
    good.write_text(f"""
listen: ":9474"
poll_interval: 5s
windows: [1m, 5m]
targets:
  - name: vllm
    url: http://127.0.0.1:8000/metrics
    timeout: 2s
    max_bytes: 16MiB
    headers: {{}}
routes:
  - name: code
    target: vllm
    match: {{model_name: "llama-code"}}
    baseline_itl_p99_seconds: 0.045
hardware: h100-sxm
tensor_parallel: 1
model:
  config_json: {model}
  dtype: bf16
draft:
  method: auto
  cost_per_token: null
  k: null
profile: null
decision:
  min_drafts: 500
  margin: 0.02
  hold: 2
log: {{format: json, level: info}}
""")
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "check-config", str(good)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert load(str(good)).model.hf_config["num_hidden_layers"] == 32


def test_run_with_a_bad_config_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("windows: [1m, 1m]\n")
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "run", "--config", str(bad)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "windows" in proc.stderr


def test_a_model_config_json_the_cost_model_cannot_use_is_a_config_error(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["Mystery"]}')
    with pytest.raises(ConfigError) as info:
        from_mapping({"model": {"config_json": str(bad)}}, environ={})
    assert str(info.value).startswith("model.config_json:")


def test_vllm_method_names_without_their_own_cost_are_accepted():
    assert from_mapping({"draft": {"method": "ngram_gpu"}}, environ={}).draft.method == "ngram_gpu"
