"""Config: defaults, durations and sizes, env overrides, and errors that name the key (exit 2);
the schema is the one source of validation, environment variables and the chart's config schema."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from specwatch import units
from specwatch.config import ConfigError, from_mapping, load, parse_duration, parse_size
from specwatch.config.chart import chart_config_schema, render
from specwatch.config.env import ENV_BINDINGS
from specwatch.config.kinds import DurationList, error_from
from specwatch.config.nodes import Items, Key, Section, result_fields
from specwatch.config.schema import SCHEMA
from specwatch.sim.scenario import ScenarioError
from specwatch.sim.scenario import parse_duration as scenario_duration

ROOT = Path(__file__).resolve().parents[1]
CHART_SCHEMA = ROOT / "helm" / "specwatch" / "values.schema.json"


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
    ({"draft": {"cost_per_token": 10}}, "draft.cost_per_token"),        # the cost model takes [0, 10)
    ({"tensor_parallel": 65}, "tensor_parallel"),
    ({"hardware": {"mbu": 0.5}}, "hardware"),                            # no preset and no figures
    ({"targets": [{"name": "a"}, {"name": "a", "url": "http://b:1/metrics"}]}, "targets"),
    ({"routes": [{"target": "vllm"}]}, "routes[0].name"),
    ({"log": {"level": "loud"}}, "log.level"),
    ({"windows": ["1m", "1m"]}, "windows"),
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
                          capture_output=True, text=True, timeout=30, check=False)
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
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert load(str(good)).model.hf_config["num_hidden_layers"] == 32


def test_run_with_a_bad_config_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("windows: [1m, 1m]\n")
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "run", "--config", str(bad)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2 and "windows" in proc.stderr


def test_a_model_config_json_the_cost_model_cannot_use_is_a_config_error(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["Mystery"]}')
    with pytest.raises(ConfigError) as info:
        from_mapping({"model": {"config_json": str(bad)}}, environ={})
    assert str(info.value).startswith("model.config_json:")


def test_vllm_method_names_without_their_own_cost_are_accepted():
    assert from_mapping({"draft": {"method": "ngram_gpu"}}, environ={}).draft.method == "ngram_gpu"


def test_a_config_error_carries_its_key_and_reason():
    with pytest.raises(ConfigError) as info:
        from_mapping({"decision": {"hold": 0}}, environ={})
    assert (info.value.key, info.value.reason) == ("decision.hold", "must be >= 1, got 0")
    assert str(info.value) == "decision.hold: must be >= 1, got 0"


def test_an_outside_error_names_the_key_from_its_attribute_else_from_its_text():
    class KeyedError(ValueError):
        def __init__(self, key, message):
            super().__init__(message)
            self.key = key

    assert str(error_from(KeyedError("draft.k", "draft.k: too long"), "model")) == "draft.k: too long"
    assert str(error_from(KeyedError("tensor_parallel", "must be >= 1"), "model")) == "tensor_parallel: must be >= 1"
    assert str(error_from(ValueError("hardware: unknown preset 'x'"), "model")) == "hardware: unknown preset 'x'"
    assert str(error_from(ValueError("missing 'hidden_size'"), "model.config_json")).startswith("model.config_json:")


# ---- one source: schema, dataclasses, environment, chart -------------------------------------------------

def _walk(section, path=()):
    """(path, node, parent section) for every node of the schema; list items get index 0."""
    for node in section.keys:
        here = (*path, node.name)
        yield here, node, section
        if isinstance(node, Section):
            yield from _walk(node, here)
        elif isinstance(node, Items):
            yield from _walk(node.item, (*here, 0))


def test_every_schema_key_is_a_dataclass_field_and_every_field_a_key():
    sections = [SCHEMA] + [n for _, n, _ in _walk(SCHEMA) if isinstance(n, Section)]
    sections += [n.item for _, n, _ in _walk(SCHEMA) if isinstance(n, Items)]
    for section in sections:
        keys = {f for node in section.keys for f in (result_fields(node) if isinstance(node, Key) else (node.name,))}
        assert keys == {f.name for f in dataclasses.fields(section.result)}, section.result.__name__


def test_the_environment_variables_of_earlier_releases_still_exist():
    earlier = ("listen", "poll_interval", "tensor_parallel", "hardware", "profile", "route_ttl_polls",
               "decision__min_drafts", "decision__margin", "decision__hold", "log__format", "log__level",
               "model__preset", "model__dtype", "model__context_tokens", "model__config_json", "model__params",
               "draft__method", "draft__k", "draft__cost_per_token", "target_url", "windows")
    names = {b.name for b in ENV_BINDINGS}
    assert {"SPECWATCH_" + key.upper() for key in earlier} <= names


def _env_text(value):
    return ",".join(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) else str(value)


def _attribute(config, path):
    value = config
    for step in path:
        value = value[step] if isinstance(step, int) else getattr(value, step)
    return value


def test_every_key_outside_a_list_has_an_environment_variable_that_sets_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256}))
    (tmp_path / "profile.yaml").write_text("points: [[1, 0.01], [64, 0.02]]\n")
    examples = {"model.config_json": "config.json", "profile": "profile.yaml"}
    bound = {b.path: b for b in ENV_BINDINGS}
    for path, node, _ in _walk(SCHEMA):
        if not isinstance(node, Key) or 0 in path:
            continue
        dotted = ".".join(map(str, path))
        assert path in bound, f"{dotted} has no environment variable"
        value = examples.get(dotted, node.example)
        base = {"hardware": "h100-sxm"} if path[0] == "hardware" else {}
        config = from_mapping(base, base_dir=str(tmp_path), environ={bound[path].name: _env_text(value)})
        default = from_mapping(base, base_dir=str(tmp_path), environ={})
        assert _attribute(config, path) != _attribute(default, path), bound[path].name
    assert from_mapping({}, environ={"SPECWATCH_HARDWARE": "h200"}).hardware.preset == "h200"
    assert from_mapping({}, environ={"SPECWATCH_TARGET_URL": "http://a:1/m"}).targets[0].url == "http://a:1/m"


def test_flags_override_the_environment_which_overrides_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('listen: ":1000"\npoll_interval: 10s\n')
    config = load(str(path), environ={"SPECWATCH_LISTEN": ":2000", "SPECWATCH_POLL_INTERVAL": "3s"},
                  overrides={"listen": ":3000"})
    assert (config.listen, config.poll_interval) == (":3000", 3.0)


def test_the_chart_config_schema_is_generated_from_the_config_schema():
    proc = subprocess.run([sys.executable, "-m", "specwatch.config.chart", str(CHART_SCHEMA), "--check"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_chart_generator_rewrites_only_the_config_subtree():
    text = CHART_SCHEMA.read_text(encoding="utf-8")
    document = json.loads(text)
    stale = json.dumps({**document, "title": "edited by hand", "properties": {
        **document["properties"], "config": {"type": "object"}}}, indent=2, ensure_ascii=False) + "\n"
    regenerated = render(stale)
    assert json.loads(regenerated)["title"] == "edited by hand"
    assert json.loads(regenerated)["properties"]["config"] == chart_config_schema()
    assert render(text) == text  # byte-identical when up to date


def _chart_validator():
    return jsonschema.Draft7Validator(chart_config_schema())


def _with(path, value):
    """A config mapping holding value at path (index 0 of a list is a one-item list)."""
    if not path:
        return value
    if isinstance(path[0], int):
        return [_with(path[1:], value)]
    return {path[0]: _with(path[1:], value)}


def test_chart_and_exporter_both_accept_every_documented_example(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,'
                                          ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}')
    (tmp_path / "profile.yaml").write_text("points: [[1, 0.01], [64, 0.02]]\n")
    files = {"model.config_json": "config.json", "profile": "profile.yaml"}
    validator = _chart_validator()
    for path, node, _ in _walk(SCHEMA):
        if not isinstance(node, Key) or not node.chart:
            continue
        dotted = ".".join(map(str, path))
        raw = _with(path, files.get(dotted, node.example))
        if path[0] == "hardware":
            raw["hardware"]["preset"] = raw["hardware"].get("preset", "h100-sxm")
        if path[0] == "routes":
            raw["routes"][0].setdefault("name", "r")
        assert not list(validator.iter_errors(raw)), dotted
        from_mapping(raw, base_dir=str(tmp_path), environ={"VLLM_API_KEY": "k"})


@pytest.mark.parametrize("raw, accepted", [
    ({"model": {"dtype": "fp16"}}, True),             # a real weights dtype the cost model prices
    ({"draft": {"method": "ngram_gpu"}}, True),       # vLLM's GPU n-gram, priced like ngram
    ({"draft": {"cost_per_token": 9.5}}, True),
    ({"draft": {"cost_per_token": 10}}, False),       # the cost model takes [0, 10)
    ({"tensor_parallel": 64}, True),
    ({"tensor_parallel": 65}, False),
    ({"targets": [{"url": "http://a:1/metrics", "max_bytes": "1TB"}]}, False),
    ({"targets": [{"url": "http://a:1/metrics", "max_bytes": "1GiB"}]}, True),
    ({"poll_interval": "5 seconds"}, False),
    ({"poll_interval": 5}, True),
    ({"hardware": "tpu-v9"}, False),
])
def test_chart_and_exporter_agree(raw, accepted):
    chart_ok = not list(_chart_validator().iter_errors(raw))
    try:
        from_mapping(raw, environ={})
        exporter_ok = True
    except ConfigError:
        exporter_ok = False
    assert (chart_ok, exporter_ok) == (accepted, accepted)


def test_one_duration_grammar_for_config_and_scenarios():
    assert parse_duration("1.5m", "k") == scenario_duration("1.5m", "k") == units.parse_duration("1.5m", "k") == 90
    assert scenario_duration(0, "at") == 0.0  # a scenario event may happen at t=0 ...
    with pytest.raises(ConfigError):
        parse_duration(0, "poll_interval")  # ... a poll interval may not be 0
    with pytest.raises(ScenarioError, match="at: expected a duration"):
        scenario_duration("soon", "at")
    assert DurationList().from_env(" 30s, 2m ,") == ["30s", "2m"]


def test_the_readme_example_config_is_generated_from_the_schema_and_loads():
    readme = ROOT / "README.md"
    proc = subprocess.run([sys.executable, "-m", "specwatch.config.docs", str(readme), "--check"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    block = readme.read_text(encoding="utf-8").split("<!-- config:begin -->")[1].split("<!-- config:end -->")[0]
    raw = yaml.safe_load(block.strip().removeprefix("```yaml").removesuffix("```"))
    config = from_mapping(raw, environ={})
    assert config == from_mapping({"routes": raw["routes"]}, environ={})  # the block shows the defaults
