"""Config: defaults, durations and sizes, env overrides, and errors that name the key (exit 2);
the declarations are the one source of validation, environment variables and the chart's config schema."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from specwatch.base import units
from specwatch.config import (
    ConfigError,
    PrometheusConfig,
    from_mapping,
    load,
    parse_duration,
    parse_prometheus,
    parse_size,
)
from specwatch.config.env import ENV_BINDINGS
from specwatch.config.kinds import DurationList, error_from
from specwatch.config.nodes import Items, Key, Section
from specwatch.config.result import SCHEMA
from specwatch.sim.scenario import ScenarioError
from specwatch.sim.scenario import parse_duration as scenario_duration
from support.cli import run_cli

ROOT = Path(__file__).resolve().parents[3]
CHART_SCHEMA = ROOT / "helm" / "specwatch" / "values.schema.json"


def test_defaults_match_the_design():
    c = from_mapping({}, environ={})
    assert c.listen == ":9474" and c.poll_interval == 5.0 and c.window_labels == ("1m", "5m")
    assert c.targets[0].url == "http://127.0.0.1:8000/metrics" and c.targets[0].timeout == 2.0
    assert c.targets[0].max_bytes == 16 * 2**20
    assert (c.decision.min_drafts, c.decision.margin, c.decision.hold) == (500, 0.02, 30.0)


@pytest.mark.parametrize(
    "text, seconds", [("500ms", 0.5), ("5s", 5), ("1m", 60), ("2h", 7200), (3, 3.0), ("1.5s", 1.5)]
)
def test_durations(text, seconds):
    assert parse_duration(text, "k") == seconds


@pytest.mark.parametrize("text, size", [("16MiB", 16 * 2**20), ("500KB", 500_000), (1024, 1024), ("2GiB", 2 * 2**30)])
def test_sizes(text, size):
    assert parse_size(text, "k") == size


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"targets": [{"timeout": "forever"}]}, "targets[0].timeout"),
        ({"targets": [{"url": "file:///etc/passwd"}]}, "targets[0].url"),
        ({"targets": [{"timeout": "10s"}]}, "targets[0].timeout"),  # must be < poll_interval
        ({"targets": [{"max_bytes": "lots"}]}, "targets[0].max_bytes"),
        ({"targets": [{"bogus": 1}]}, "targets[0].bogus"),
        ({"pol_interval": "5s"}, "pol_interval"),
        ({"windows": ["1m", "nope"]}, "windows[1]"),
        ({"windows": ["5s"]}, "windows[0]"),  # shorter than 2 polls
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
        ({"draft": {"cost_per_token": 10}}, "draft.cost_per_token"),  # the cost model takes [0, 10)
        ({"tensor_parallel": 65}, "tensor_parallel"),
        ({"hardware": {"mbu": 0.5}}, "hardware"),  # no preset and no figures
        ({"targets": [{"name": "a"}, {"name": "a", "url": "http://b:1/metrics"}]}, "targets"),
        ({"routes": [{"target": "vllm"}]}, "routes[0].name"),
        ({"log": {"level": "loud"}}, "log.level"),
        ({"windows": ["1m", "1m"]}, "windows"),
        (
            {"targets": [{"headers": {"Authorization": "Bearer ${SPECWATCH_TEST_UNSET_TOKEN}"}}]},
            "targets[0].headers.Authorization",
        ),
    ],
)
def test_bad_values_raise_one_error_naming_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        from_mapping(raw, environ={})
    assert str(info.value).startswith(key + ":"), str(info.value)


def test_environment_overrides_file_values_and_header_values_come_from_env():
    c = from_mapping(
        {"poll_interval": "5s", "targets": [{"headers": {"Authorization": "Bearer ${TOKEN}"}}]},
        environ={
            "SPECWATCH_POLL_INTERVAL": "10s",
            "SPECWATCH_DECISION__MIN_DRAFTS": "1000",
            "SPECWATCH_TARGET_URL": "http://10.0.0.1:8000/metrics",
            "TOKEN": "s3cret",
            "SPECWATCH_WINDOWS": "30s,2m",
        },
    )
    assert c.poll_interval == 10.0 and c.decision.min_drafts == 1000
    assert c.targets[0].url == "http://10.0.0.1:8000/metrics"
    assert c.targets[0].headers["Authorization"] == "Bearer s3cret"
    assert c.window_labels == ("30s", "2m")


def test_check_config_exits_2_with_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  - url: http://127.0.0.1:8000/metrics\n    timeout: soon\n")
    proc = run_cli("check-config", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 1  # the error line, then the hint line
    assert "targets[0].timeout" in proc.stderr


def test_check_config_accepts_the_documented_example(tmp_path):
    model = tmp_path / "config.json"
    model.write_text(
        '{"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,'
        ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}'
    )
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
    proc = run_cli("check-config", str(good))
    assert proc.returncode == 0, proc.stderr
    assert load(str(good)).model.hf_config["num_hidden_layers"] == 32


def test_run_with_a_bad_config_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("windows: [1m, 1m]\n")
    proc = run_cli("run", "--config", str(bad))
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


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"model": {"hf_config": {}}}, "model.hf_config"),
        ({"draft": {"model_hf_config": {}}}, "draft.model_hf_config"),
        ({"profile_path": "p.yaml"}, "profile_path"),
        ({"stated": ["listen"]}, "stated"),
    ],
)
def test_a_field_derived_at_load_time_is_no_key(raw, key):
    with pytest.raises(ConfigError, match="unknown key") as caught:
        from_mapping(raw, environ={})
    assert caught.value.key == key


def test_the_environment_variables_of_earlier_releases_still_exist():
    earlier = (
        "listen",
        "poll_interval",
        "tensor_parallel",
        "hardware",
        "profile",
        "route_ttl_polls",
        "decision__min_drafts",
        "decision__margin",
        "decision__hold",
        "log__format",
        "log__level",
        "model__preset",
        "model__dtype",
        "model__context_tokens",
        "model__config_json",
        "model__params",
        "draft__method",
        "draft__k",
        "draft__cost_per_token",
        "target_url",
        "windows",
    )
    names = {b.name for b in ENV_BINDINGS}
    assert {"SPECWATCH_" + key.upper() for key in earlier} <= names


def _env_text(value):
    if isinstance(value, dict):
        return json.dumps(value)
    return ",".join(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) else str(value)


# An optional section needs its required keys before any other key of it can be set.
PROMETHEUS_URL = {"url": "http://prom.example:9090"}


def _base(path):
    if path[0] == "hardware":
        return {"hardware": "h100-sxm"}
    if tuple(path) == ("prometheus", "deployment_labels"):  # named among the replica labels
        return {"prometheus": {**PROMETHEUS_URL, "replica_labels": ["namespace", "pod"]}}
    if tuple(path[:2]) == ("prometheus", "shard"):  # the other of index and total given
        return {"prometheus": {**PROMETHEUS_URL, "shard": {"index": 1, "total": 3}}}
    return {path[0]: dict(PROMETHEUS_URL)} if path[0] in ("prometheus", "readback") else {}


def _example_files(tmp_path):
    """Example files some keys point at, by dotted key."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
            }
        )
    )
    (tmp_path / "profile.yaml").write_text("points: [[1, 0.01], [64, 0.02]]\n")
    (tmp_path / "token").write_text("t0ken\n")
    return {
        "model.config_json": "config.json",
        "profile": "profile.yaml",
        "prometheus.bearer_token_file": "token",
        "readback.bearer_token_file": "token",
    }


def _attribute(config, path):
    value = config
    for step in path:
        value = value[step] if isinstance(step, int) else getattr(value, step)
    return value


def test_every_key_outside_a_list_has_an_environment_variable_that_sets_it(tmp_path):
    examples = _example_files(tmp_path)
    bound = {b.path: b for b in ENV_BINDINGS}
    for path, node, _ in _walk(SCHEMA):
        if not isinstance(node, Key) or 0 in path:
            continue
        dotted = ".".join(map(str, path))
        assert path in bound, f"{dotted} has no environment variable"
        value = examples.get(dotted, node.example)
        base = _base(path)
        environ = {bound[path].name: _env_text(value), "TENANT": "tenant-a"}
        config = from_mapping(base, base_dir=str(tmp_path), environ=environ)
        default = from_mapping(base, base_dir=str(tmp_path), environ={})
        assert _attribute(config, path) != _attribute(default, path), bound[path].name
    assert from_mapping({}, environ={"SPECWATCH_HARDWARE": "h200"}).hardware.preset == "h200"
    assert from_mapping({}, environ={"SPECWATCH_TARGET_URL": "http://a:1/m"}).targets[0].url == "http://a:1/m"


def test_flags_override_the_environment_which_overrides_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('listen: ":1000"\npoll_interval: 10s\n')
    config = load(
        str(path), environ={"SPECWATCH_LISTEN": ":2000", "SPECWATCH_POLL_INTERVAL": "3s"}, overrides={"listen": ":3000"}
    )
    assert (config.listen, config.poll_interval) == (":3000", 3.0)


def _tool(script, *args):
    """`python tools/SCRIPT ARGS` as CI runs it."""
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / script), *args], capture_output=True, text=True, timeout=60, check=False
    )


def _chart_config_schema():
    """The chart's config schema as committed (CI's gate fails when it is not what the declarations give)."""
    return json.loads(CHART_SCHEMA.read_text(encoding="utf-8"))["properties"]["config"]


def test_the_chart_generator_rewrites_only_the_config_subtree_and_check_fails_on_drift(tmp_path):
    text = CHART_SCHEMA.read_text(encoding="utf-8")
    document = json.loads(text)
    stale = (
        json.dumps(
            {
                **document,
                "title": "edited by hand",
                "properties": {**document["properties"], "config": {"type": "object"}},
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )
    path = tmp_path / "values.schema.json"
    path.write_text(stale, encoding="utf-8")
    check = _tool("gen_chart_schema.py", str(path), "--check")
    assert check.returncode == 1 and "run python tools/gen_chart_schema.py" in check.stderr
    assert path.read_text(encoding="utf-8") == stale  # --check writes nothing
    assert _tool("gen_chart_schema.py", str(path)).returncode == 0
    regenerated = json.loads(path.read_text(encoding="utf-8"))
    assert regenerated["title"] == "edited by hand"
    assert regenerated["properties"]["config"] == document["properties"]["config"]
    assert _tool("gen_chart_schema.py", str(path), "--check").returncode == 0


def _chart_validator():
    return jsonschema.Draft7Validator(_chart_config_schema())


def _with(path, value):
    """A config mapping holding value at path (index 0 of a list is a one-item list)."""
    if not path:
        return value
    if isinstance(path[0], int):
        return [_with(path[1:], value)]
    return {path[0]: _with(path[1:], value)}


def test_chart_and_exporter_both_accept_every_documented_example(tmp_path):
    files = _example_files(tmp_path)
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
        if path[0] in ("prometheus", "readback"):
            raw[path[0]] = {**PROMETHEUS_URL, **raw[path[0]]}
        if dotted == "prometheus.deployment_labels":  # named among the replica labels (a rule across keys)
            raw["prometheus"]["replica_labels"] = [*node.example, "pod"]
        if path[:2] == ("prometheus", "shard"):  # index and total are given together
            raw["prometheus"]["shard"] = {"index": 1, "total": 3, **raw["prometheus"]["shard"]}
        assert not list(validator.iter_errors(raw)), dotted
        from_mapping(raw, base_dir=str(tmp_path), environ={"VLLM_API_KEY": "k", "TENANT": "t"})


@pytest.mark.parametrize(
    "raw, accepted",
    [
        ({"model": {"dtype": "fp16"}}, True),  # a real weights dtype the cost model prices
        ({"draft": {"method": "ngram_gpu"}}, True),  # vLLM's GPU n-gram, priced like ngram
        ({"draft": {"cost_per_token": 9.5}}, True),
        ({"draft": {"cost_per_token": 10}}, False),  # the cost model takes [0, 10)
        ({"tensor_parallel": 64}, True),
        ({"tensor_parallel": 65}, False),
        ({"targets": [{"url": "http://a:1/metrics", "max_bytes": "1TB"}]}, False),
        ({"targets": [{"url": "http://a:1/metrics", "max_bytes": "1GiB"}]}, True),
        ({"poll_interval": "5 seconds"}, False),
        ({"poll_interval": 5}, True),
        ({"hardware": "tpu-v9"}, False),
        ({"prometheus": None}, True),
        ({"prometheus": {"url": "http://mimir/prometheus/"}}, True),
        ({"prometheus": {"url": "http://p:9090?x=1"}}, False),
        ({"prometheus": {"selector": '{job="vllm"}'}}, False),  # url is required
        ({"prometheus": {"url": "http://p:9090", "replica_labels": ["pod", "le"]}}, False),
        ({"prometheus": {"url": "http://p:9090", "replica_labels": []}}, False),
        ({"prometheus": {"url": "http://p:9090", "deployment_labels": []}}, True),
        ({"prometheus": {"url": "http://p:9090", "replica_labels": ["ns", "pod"], "deployment_labels": ["ns"]}}, True),
        ({"prometheus": {"url": "http://p:9090", "deployment_labels": ["name-space"]}}, False),
        ({"prometheus": {"url": "http://p:9090", "deployment_labels": ["ns", "ns"]}}, False),
        ({"prometheus": {"url": "http://p:9090", "headers": {"X Tenant": "a"}}}, False),
        ({"prometheus": {"url": "http://p:9090", "wat": 1}}, False),
        ({"readback": {"url": "http://p:9090", "selector": '{job="specwatch"}'}}, True),
        ({"readback": {"selector": '{job="specwatch"}'}}, False),  # url is required
        ({"prometheus": {"url": "http://p:9090", "recorded": "auto"}}, True),
        ({"prometheus": {"url": "http://p:9090", "recorded": "maybe"}}, False),
        ({"prometheus": {"url": "http://p:9090", "shard": {"index": 0, "total": 1}}}, True),
        ({"prometheus": {"url": "http://p:9090", "shard": {"index": 0}}}, False),  # total is required
    ],
)
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


def test_the_documented_example_config_is_generated_from_the_schema_and_loads():
    readme = ROOT / "docs" / "configuration.md"
    block = readme.read_text(encoding="utf-8").split("<!-- config:begin -->")[1].split("<!-- config:end -->")[0]
    raw = yaml.safe_load(block.strip().removeprefix("```yaml").removesuffix("```"))
    config = from_mapping(raw, environ={})
    assert config == from_mapping({"routes": raw["routes"]}, environ={})  # the block shows the defaults


# ---- fleet mode: prometheus ------------------------------------------------------------------------------


def _prometheus(environ=None, base_dir=".", **raw):
    return from_mapping({"prometheus": {**PROMETHEUS_URL, **raw}}, environ=environ or {}, base_dir=base_dir)


def test_readback_is_refused_in_fleet_mode_with_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^readback: not used with prometheus"):
        from_mapping({"prometheus": PROMETHEUS_URL, "readback": PROMETHEUS_URL}, environ={})


def test_the_issue_example_loads_into_fleet_mode_and_polls_no_target():
    config = from_mapping(
        yaml.safe_load("""
prometheus:
  url: http://prometheus:9090
  selector: '{namespace="llm", job="vllm"}'
  replica_labels: [namespace, pod]
  headers: {X-Scope-OrgID: "${TENANT}"}
  bearer_token_file: null
  timeout: 4s
routes:
  - name: code
    match: {model_name: llama-code}
"""),
        environ={"TENANT": "tenant-a"},
    )
    assert config.prometheus == PrometheusConfig(
        url="http://prometheus:9090",
        selector='{namespace="llm", job="vllm"}',
        replica_labels=("namespace", "pod"),
        headers={"X-Scope-OrgID": "tenant-a"},
        bearer_token_file=None,
        timeout=4.0,
        max_bytes=64 * 2**20,
        scrape_interval=None,
    )
    assert config.prometheus.matchers == 'namespace="llm", job="vllm"'
    assert config.targets == () and config.routes[0].target == ""
    assert from_mapping({}, environ={}).prometheus is None  # sidecar mode by default
    assert from_mapping({"prometheus": None}, environ={}).prometheus is None


def test_the_fleet_sections_fields_match_the_fleet_sources_dataclass():
    """The fleet source reads config.prometheus in place of its own PrometheusSourceConfig."""
    assert [(f.name, str(f.type)) for f in dataclasses.fields(PrometheusConfig)] == [
        ("url", "str"),
        ("selector", "str"),
        ("replica_labels", "tuple[str, ...]"),
        ("deployment_labels", "tuple[str, ...]"),
        ("headers", "Mapping[str, str]"),
        ("bearer_token_file", "str | None"),
        ("timeout", "float"),
        ("max_bytes", "int"),
        ("scrape_interval", "float | None"),
        ("canary", "Mapping[str, str]"),
        ("history_lookback", "float"),
        ("recorded", "bool | None"),
        ("shard", "tuple[int, int]"),
    ]
    assert PrometheusConfig(url="http://p", selector=' { job="vllm", } ').matchers == 'job="vllm"'
    assert PrometheusConfig(url="http://p").matchers == ""


def test_the_canary_is_named_by_replica_labels_or_model_name_and_another_label_is_refused():
    section = {**PROMETHEUS_URL, "replica_labels": ["namespace", "pod"]}
    chosen = {"pod": "llama-canary-0", "model_name": "llama"}
    assert from_mapping({"prometheus": {**section, "canary": chosen}}, environ={}).prometheus.canary == chosen
    assert from_mapping({"prometheus": section}, environ={}).prometheus.canary == {}
    with pytest.raises(ConfigError) as err:
        from_mapping({"prometheus": {**section, "canary": {"instance": "x:8000"}}}, environ={})
    assert err.value.key == "prometheus.canary.instance"


def test_the_prometheus_timeout_defaults_below_poll_interval_and_an_explicit_one_must_stay_below():
    assert _prometheus().prometheus.timeout == 4.0  # 0.8 x the 5s default poll
    assert from_mapping({"poll_interval": "30s", "prometheus": PROMETHEUS_URL}, environ={}).prometheus.timeout == 10.0
    assert (
        from_mapping(
            {"poll_interval": "30s", "prometheus": {**PROMETHEUS_URL, "timeout": "25s"}}, environ={}
        ).prometheus.timeout
        == 25.0
    )
    assert parse_prometheus(PROMETHEUS_URL, environ={}).timeout == 10.0  # the section alone: dataclass default


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"prometheus": {"selector": '{job="vllm"}'}}, "prometheus.url"),
        ({"prometheus": {"url": "file:///etc/passwd"}}, "prometheus.url"),
        ({"prometheus": {"url": "http://p:9090/?tenant=a"}}, "prometheus.url"),
        ({"prometheus": {**PROMETHEUS_URL, "selector": 'job="vllm" namespace="llm"'}}, "prometheus.selector"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": "pod"}}, "prometheus.replica_labels"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": ["pod", "model_name"]}}, "prometheus.replica_labels[1]"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": ["__address__"]}}, "prometheus.replica_labels[0]"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": ["specwatch_family"]}}, "prometheus.replica_labels[0]"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": ["pod-name"]}}, "prometheus.replica_labels[0]"),
        ({"prometheus": {**PROMETHEUS_URL, "replica_labels": ["pod", "pod"]}}, "prometheus.replica_labels"),
        ({"prometheus": {**PROMETHEUS_URL, "deployment_labels": "namespace"}}, "prometheus.deployment_labels"),
        ({"prometheus": {**PROMETHEUS_URL, "deployment_labels": ["name-space"]}}, "prometheus.deployment_labels[0]"),
        (
            {"prometheus": {**PROMETHEUS_URL, "deployment_labels": ["namespace", "namespace"]}},
            "prometheus.deployment_labels",
        ),
        # not a replica label: it would read "" for every replica
        ({"prometheus": {**PROMETHEUS_URL, "deployment_labels": ["namespace"]}}, "prometheus.deployment_labels[0]"),
        ({"prometheus": {**PROMETHEUS_URL, "headers": {"X-Scope-OrgID": 7}}}, "prometheus.headers.X-Scope-OrgID"),
        (
            {"prometheus": {**PROMETHEUS_URL, "headers": {"X-Scope-OrgID": "${UNSET_TENANT}"}}},
            "prometheus.headers.X-Scope-OrgID",
        ),
        ({"prometheus": {**PROMETHEUS_URL, "headers": {"Bad Name": "a"}}}, "prometheus.headers.Bad Name"),
        ({"prometheus": {**PROMETHEUS_URL, "bearer_token_file": "/nonexistent/token"}}, "prometheus.bearer_token_file"),
        ({"prometheus": {**PROMETHEUS_URL, "timeout": "soon"}}, "prometheus.timeout"),
        ({"prometheus": {**PROMETHEUS_URL, "timeout": "5s"}}, "prometheus.timeout"),  # not below poll_interval
        ({"prometheus": {**PROMETHEUS_URL, "max_bytes": "lots"}}, "prometheus.max_bytes"),
        ({"prometheus": {**PROMETHEUS_URL, "scrape_interval": 0}}, "prometheus.scrape_interval"),
        ({"prometheus": {**PROMETHEUS_URL, "scrape_interval": "1m"}}, "windows[0]"),  # 1m holds one scrape
        ({"prometheus": {**PROMETHEUS_URL, "interval": "1m"}}, "prometheus.interval"),
        ({"prometheus": "http://prometheus:9090"}, "prometheus"),
        ({"prometheus": PROMETHEUS_URL, "targets": [{"url": "http://10.0.0.1:8000/metrics"}]}, "targets"),
        ({"prometheus": PROMETHEUS_URL, "routes": [{"name": "a", "target": "vllm"}]}, "routes[0].target"),
        ({"prometheus": PROMETHEUS_URL, "routes": [{"name": "a"}, {"name": "a"}]}, "routes"),
    ],
)
def test_each_bad_prometheus_key_raises_one_error_naming_it(raw, key):
    with pytest.raises(ConfigError) as info:
        from_mapping(raw, environ={})
    assert info.value.key == key and "\n" not in str(info.value), str(info.value)


def test_history_lookback_defaults_to_12h_takes_a_duration_and_0s_turns_it_off():
    assert _prometheus().prometheus.history_lookback == 12 * 3600.0
    assert _prometheus(history_lookback="90m").prometheus.history_lookback == 5400.0
    assert _prometheus(history_lookback="0s").prometheus.history_lookback == 0.0
    env = from_mapping(
        {}, environ={"SPECWATCH_PROMETHEUS__URL": "http://p:9090", "SPECWATCH_PROMETHEUS__HISTORY_LOOKBACK": "2h"}
    )
    assert env.prometheus.history_lookback == 7200.0


@pytest.mark.parametrize("value", ["soon", "-1h", True, [1]])
def test_a_bad_history_lookback_raises_one_error_naming_it(value):
    with pytest.raises(ConfigError) as info:
        _prometheus(history_lookback=value)
    assert info.value.key == "prometheus.history_lookback" and "\n" not in str(info.value), str(info.value)


def test_deployment_labels_default_to_none_and_name_replica_labels():
    assert _prometheus().prometheus.deployment_labels == ()
    config = _prometheus(replica_labels=["namespace", "pod"], deployment_labels=["namespace"])
    assert config.prometheus.deployment_labels == ("namespace",)
    assert _prometheus(replica_labels=["namespace", "pod"], deployment_labels=[]).prometheus.deployment_labels == ()
    env = from_mapping(
        {},
        environ={
            "SPECWATCH_PROMETHEUS__URL": "http://p:9090",
            "SPECWATCH_PROMETHEUS__REPLICA_LABELS": "namespace,deployment,pod",
            "SPECWATCH_PROMETHEUS__DEPLOYMENT_LABELS": "namespace,deployment",
        },
    )
    assert env.prometheus.deployment_labels == ("namespace", "deployment")
    # The grading's key: a change starts the evaluator afresh.
    assert config.fleet_shape() != _prometheus(replica_labels=["namespace", "pod"]).fleet_shape()


def test_check_config_names_a_deployment_label_that_is_no_replica_label_in_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text(
        "prometheus:\n  url: http://prometheus:9090\n  replica_labels: [pod]\n  deployment_labels: [namespace]\n"
    )
    proc = run_cli("check-config", str(bad))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 1  # the error line, then the hint line
    assert "prometheus.deployment_labels[0]: namespace is not one of prometheus.replica_labels" in proc.stderr


def test_recorded_and_shard_default_to_raw_reads_and_every_route():
    prometheus = _prometheus().prometheus
    assert (prometheus.recorded, prometheus.shard) == (False, (0, 1))


def test_a_shard_takes_an_index_below_its_total_from_the_file_or_the_environment():
    assert _prometheus(shard={"index": 1, "total": 3}, recorded=False).prometheus.shard == (1, 3)
    environ = {"SPECWATCH_PROMETHEUS__SHARD": "0/2", "SPECWATCH_PROMETHEUS__RECORDED": "true"}
    prometheus = _prometheus(environ=environ).prometheus
    assert (prometheus.shard, prometheus.recorded) == ((0, 2), True)
    # The chart's StatefulSet: the pod's name ends in its ordinal.
    assert _prometheus(environ={"SPECWATCH_PROMETHEUS__SHARD": "specwatch-fleet-2/4"}).prometheus.shard == (2, 4)
    assert parse_prometheus({**PROMETHEUS_URL, "shard": {"index": 2, "total": 4}}).shard == (2, 4)
    assert _prometheus(recorded="auto").prometheus.recorded is None
    assert _prometheus().prometheus.shard == (0, 1)


@pytest.mark.parametrize(
    ("shard", "key"),
    [
        ({"index": 2, "total": 2}, "prometheus.shard.index"),
        ({"index": -1, "total": 2}, "prometheus.shard.index"),
        ({"index": 0}, "prometheus.shard.total"),
        ({"index": 0, "total": 0}, "prometheus.shard.total"),
        ("all", "prometheus.shard"),
    ],
)
def test_a_bad_shard_raises_one_error_naming_its_key(shard, key):
    with pytest.raises(ConfigError) as caught:
        _prometheus(shard=shard)
    assert caught.value.key == key


def test_changing_only_history_lookback_keeps_the_fleet_shape():
    """A reload that changes it alone keeps the evaluator (and its verdicts): nothing is replayed again."""
    assert _prometheus(history_lookback="1h").fleet_shape() == _prometheus(history_lookback="0s").fleet_shape()
    assert _prometheus(selector='{job="a"}').fleet_shape() != _prometheus().fleet_shape()


def test_check_config_names_a_bad_history_lookback_in_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text("prometheus:\n  url: http://prometheus:9090\n  history_lookback: yesterday\n")
    proc = run_cli("check-config", str(bad))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 1  # the error line, then the hint line
    assert "prometheus.history_lookback:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_prometheus_target_url_from_the_environment_conflicts_with_fleet_mode_too():
    with pytest.raises(ConfigError, match=r"^targets: not used with prometheus"):
        from_mapping({"prometheus": PROMETHEUS_URL}, environ={"SPECWATCH_TARGET_URL": "http://a:1/metrics"})


def test_the_prometheus_section_comes_from_the_environment_alone():
    config = from_mapping(
        {},
        environ={
            "SPECWATCH_PROMETHEUS__URL": "https://mimir.example/prometheus/",
            "SPECWATCH_PROMETHEUS__SELECTOR": '{job="vllm"}',
            "SPECWATCH_PROMETHEUS__REPLICA_LABELS": "namespace, pod",
            "SPECWATCH_PROMETHEUS__HEADERS": '{"X-Scope-OrgID": "${TENANT}"}',
            "SPECWATCH_PROMETHEUS__TIMEOUT": "3s",
            "SPECWATCH_PROMETHEUS__MAX_BYTES": "8MiB",
            "SPECWATCH_PROMETHEUS__SCRAPE_INTERVAL": "15s",
            "TENANT": "tenant-a",
        },
    )
    assert config.prometheus == PrometheusConfig(
        url="https://mimir.example/prometheus",
        selector='{job="vllm"}',
        replica_labels=("namespace", "pod"),
        headers={"X-Scope-OrgID": "tenant-a"},
        timeout=3.0,
        max_bytes=8 * 2**20,
        scrape_interval=15.0,
    )
    overridden = from_mapping(
        {"prometheus": {"url": "http://file:9090", "timeout": "2s"}},
        environ={"SPECWATCH_PROMETHEUS__URL": "http://env:9090"},
    )
    assert (overridden.prometheus.url, overridden.prometheus.timeout) == ("http://env:9090", 2.0)
    with pytest.raises(
        ConfigError, match=r"^environment variable SPECWATCH_PROMETHEUS__HEADERS: expected a JSON object"
    ):
        from_mapping(
            {},
            environ={"SPECWATCH_PROMETHEUS__URL": "http://p:9090", "SPECWATCH_PROMETHEUS__HEADERS": "X-Scope-OrgID=a"},
        )


@pytest.mark.parametrize(
    "selector, matchers",
    [
        ("", ""),
        ("{}", ""),
        ('{job="vllm"}', 'job="vllm"'),
        ('namespace="llm",job="vllm"', 'namespace="llm",job="vllm"'),
        (
            " { namespace = \"llm\" , job != 'x' , pod =~ `vllm-.+` , } ",
            "namespace = \"llm\" , job != 'x' , pod =~ `vllm-.+`",
        ),
        ('{pod!~"vllm-(canary|test)-.*"}', 'pod!~"vllm-(canary|test)-.*"'),
        ('{job="a\\"b"}', 'job="a\\"b"'),
        ('{job="\\u0041\\x41\\101\\n"}', 'job="\\u0041\\x41\\101\\n"'),
        ('{pod=~"\\\\pL+"}', 'pod=~"\\\\pL+"'),  # RE2's \pL, which Python's re lacks
    ],
)
def test_a_valid_selector_is_kept_and_its_matchers_drop_the_braces(selector, matchers):
    assert _prometheus(selector=selector).prometheus.matchers == matchers


BAD_SELECTORS = [
    'job="vllm" namespace="llm"',  # no comma
    "job",  # no operator
    "job=vllm",  # value not quoted
    'job=="vllm"',
    '{job="vllm"',  # unbalanced brace
    'job="vllm",,',
    ",",
    'job="a\\qb"',  # unknown escape
    "job='a\\\"b'",  # \" in a single-quoted string
    'job="a\nb"',  # line break in a string
    'pod=~"vllm-("',  # bad regular expression
    'pod=~"(?!canary).*"',  # lookahead: not RE2
    '__name__="vllm:num_requests_running"',
    '"pod.name"="x"',  # quoted (UTF-8) label names are not supported
]


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_a_bad_selector_is_one_error_naming_prometheus_selector(selector):
    with pytest.raises(ConfigError) as info:
        _prometheus(selector=selector)
    assert info.value.key == "prometheus.selector" and "\n" not in info.value.reason, str(info.value)


@pytest.mark.parametrize(
    "selector",
    [s for s in BAD_SELECTORS if "(?!" not in s and '"pod.name"' not in s]
    + ['{job="vllm"}', 'a = "b" , c!~"d",', "a='b'", 'a="\\x41"', 'a=~"x|y"'],
)
def test_the_selector_check_agrees_with_a_promql_parser(selector):
    promql_parser = pytest.importorskip("promql_parser")
    body = selector.strip()
    body = body[1:-1] if body.startswith("{") and body.endswith("}") else body
    try:
        promql_parser.parse("vllm:num_requests_running{" + body + "}")
        parser_ok = True
    except ValueError:
        parser_ok = False
    try:
        _prometheus(selector=selector)
        ours_ok = True
    except ConfigError:
        ours_ok = False
    assert ours_ok == parser_ok


def test_header_values_come_from_the_environment_and_a_secret_is_never_shown():
    config = _prometheus(
        headers={"X-Scope-OrgID": "${TENANT}", "X-Team": "llm-${TEAM}"}, environ={"TENANT": "tenant-a", "TEAM": "infra"}
    )
    assert dict(config.prometheus.headers) == {"X-Scope-OrgID": "tenant-a", "X-Team": "llm-infra"}
    # A Secret mounted as an env var often ends in a newline: every request would refuse it.
    with pytest.raises(ConfigError) as info:
        _prometheus(headers={"X-Scope-OrgID": "${TENANT}"}, environ={"TENANT": "s3cret-tenant\n"})
    assert info.value.key == "prometheus.headers.X-Scope-OrgID" and "s3cret" not in str(info.value)
    with pytest.raises(ConfigError, match="environment variable TENANT is not set"):
        _prometheus(headers={"X-Scope-OrgID": "${TENANT}"}, environ={})


def test_a_bearer_token_file_is_relative_to_the_config_file_and_excludes_an_authorization_header(tmp_path):
    (tmp_path / "token").write_text("t0ken\n")
    path = tmp_path / "specwatch.yaml"
    path.write_text("prometheus:\n  url: http://prometheus:9090\n  bearer_token_file: token\n")
    assert load(str(path), environ={}).prometheus.bearer_token_file == str(tmp_path / "token")
    with pytest.raises(ConfigError) as info:
        _prometheus(bearer_token_file=str(tmp_path / "token"), headers={"authorization": "Bearer x"})
    assert info.value.key == "prometheus.bearer_token_file"


def test_check_config_names_the_bad_prometheus_key_in_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text('prometheus:\n  url: http://prometheus:9090\n  selector: \'job="vllm" pod="x"\'\n')
    proc = run_cli("check-config", str(bad))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 1  # the error line, then the hint line
    assert proc.stderr.strip().startswith("prometheus.selector:") or "prometheus.selector:" in proc.stderr


def test_the_documented_config_shows_the_prometheus_section_commented_out_and_it_loads_uncommented(tmp_path):
    readme = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = readme.split("<!-- config:begin -->")[1].split("<!-- config:end -->")[0]
    files = _example_files(tmp_path)

    def uncommented(start: str, end: str | None) -> dict:
        text = block[block.index(start) : block.index(end) if end else None]
        raw = yaml.safe_load("\n".join(line[2:] for line in text.split("\n") if line.startswith("#")))
        section = next(iter(raw))
        raw[section]["bearer_token_file"] = str(files[f"{section}.bearer_token_file"])
        return raw

    config = from_mapping(
        uncommented("# prometheus:", "# readback:"), base_dir=str(tmp_path), environ={"TENANT": "tenant-a"}
    )
    assert config.prometheus.selector == '{namespace="llm", job="vllm"}'
    assert config.prometheus.headers == {"X-Scope-OrgID": "tenant-a"}
    sidecar = from_mapping(uncommented("# readback:", None), base_dir=str(tmp_path), environ={"TENANT": "tenant-a"})
    assert sidecar.readback is not None and sidecar.readback.selector == '{namespace="llm", job="vllm-llama"}'
    assert sidecar.prometheus is None and sidecar.targets  # a sidecar that polls its vLLM


def test_engine_picks_its_fixed_costs_of_speculation_and_null_keeps_the_generic_ones():
    from specwatch.config.cost_model import cost_model_from_config
    from specwatch.costmodel.engine_priors import ENGINE_PRIORS, GENERIC

    default = cost_model_from_config(from_mapping({}, environ={}))
    assert (default.verify_overhead_seconds, default.verify_seconds_per_request) == (
        GENERIC.verify_overhead_seconds,
        GENERIC.verify_seconds_per_request,
    )
    vllm = cost_model_from_config(from_mapping({"engine": "vllm", "draft": {"method": "eagle3"}}, environ={}))
    prior = ENGINE_PRIORS["vllm-v1"]
    assert vllm.verify_overhead_seconds == prior.verify_overhead_seconds
    assert vllm.verify_seconds_per_request == prior.verify_seconds_per_request
    assert vllm.draft.fixed_seconds == prior.draft_fixed_seconds
    v0 = from_mapping({"engine": {"name": "vllm", "version": "0.6.3"}}, environ={})
    assert cost_model_from_config(v0).verify_overhead_seconds == ENGINE_PRIORS["vllm-v0"].verify_overhead_seconds
    ngram = cost_model_from_config(from_mapping({"engine": "vllm", "draft": {"method": "ngram"}}, environ={}))
    assert ngram.draft.fixed_seconds == 0.0  # only a draft head pays per drafting pass
    with pytest.raises(ConfigError, match=r"^engine: expected one of vllm, "):
        from_mapping({"engine": "vlm"}, environ={})


@pytest.mark.parametrize("section", ["prometheus", "readback"])
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("headers", {"X-Scope-OrgID": "${TENANT}"}, "environment variable TENANT is not set"),
        ("bearer_token_file", "no-such-token", "no-such-token"),
        ("timeout", "soon", "duration"),
        ("max_bytes", "lots", "size"),
    ],
)
def test_both_query_sections_refuse_a_bad_query_client_key_in_one_line_naming_it(section, key, value, message):
    # fleet mode and the read-back share the query client's keys: each section names its own key
    raw = {section: {**PROMETHEUS_URL, key: value}}
    with pytest.raises(ConfigError) as info:
        from_mapping(raw, environ={})
    assert info.value.key.startswith(f"{section}.{key}") and message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"poll_interval": "5s", "evaluation_interval": "2s"},
            r"^evaluation_interval: must be at least poll_interval \(5s\)",
        ),
        (
            {"poll_interval": "1s", "evaluation_interval": "40s"},
            r"^windows\[0\]: must be at least 2 x evaluation_interval \(80s\)",
        ),
        (
            {"prometheus": PROMETHEUS_URL, "evaluation_interval": "30s"},
            r"^evaluation_interval: not used with prometheus",
        ),
    ],
)
def test_an_evaluation_interval_shorter_than_a_poll_or_half_a_window_or_in_fleet_mode_is_refused(raw, message):
    with pytest.raises(ConfigError, match=message):
        from_mapping(raw, environ={})


def test_unset_the_evaluation_period_is_five_seconds_or_the_poll_and_an_integer_hold_counts_evaluations():
    every = from_mapping({"poll_interval": "1s", "evaluation_interval": "1s", "decision": {"hold": 3}}, environ={})
    assert every.evaluation_period == 1.0 and every.decision.hold_seconds(every.evaluation_period) == 2.0
    spaced = from_mapping({"poll_interval": "1s", "evaluation_interval": "5s", "decision": {"hold": 3}}, environ={})
    assert spaced.evaluation_period == 5.0
    assert spaced.decision.hold_seconds(spaced.evaluation_period) == 10.0
    assert every.evaluation_due(0.0) and not spaced.evaluation_due(4.4) and spaced.evaluation_due(4.5)
    # Unset: polls faster than five seconds are evaluated every five (never more than half the
    # shortest window apart); slower polls, and fleet mode's, at every poll.
    fast = from_mapping({"poll_interval": "1s", "decision": {"hold": 3}}, environ={})
    assert fast.evaluation_interval is None and fast.evaluation_period == 5.0
    assert fast.decision.hold_seconds(fast.evaluation_period) == 10.0
    assert not fast.evaluation_due(4.4) and fast.evaluation_due(4.5)
    assert from_mapping({"poll_interval": "1s", "windows": ["4s", "1m"]}, environ={}).evaluation_period == 2.0
    default = from_mapping({}, environ={})
    assert default.poll_interval == default.evaluation_period == 5.0 and default.evaluation_due(0.0)
    assert from_mapping({"poll_interval": "10s"}, environ={}).evaluation_period == 10.0
    fleet = from_mapping({"poll_interval": "1s", "prometheus": {"url": "http://prometheus:9090"}}, environ={})
    assert fleet.evaluation_period == 1.0 and fleet.evaluation_due(0.0)
    timed = from_mapping({"poll_interval": "1s", "evaluation_interval": "5s", "decision": {"hold": "30s"}}, environ={})
    assert timed.decision.hold_seconds(timed.evaluation_period) == 30.0


def test_check_config_names_the_evaluation_interval_and_exits_2_on_a_bad_one(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("poll_interval: 1s\nevaluation_interval: 5s\n")
    proc = run_cli("check-config", str(good))
    assert proc.returncode == 0, proc.stderr
    assert "poll every 1s, evaluate every 5s)" in proc.stdout
    unset = tmp_path / "unset.yaml"
    unset.write_text("poll_interval: 2s\n")
    proc = run_cli("check-config", str(unset))
    assert proc.returncode == 0 and "poll every 2s, evaluate every 5s)" in proc.stdout, proc.stderr
    every = tmp_path / "every.yaml"
    every.write_text("poll_interval: 5s\n")
    proc = run_cli("check-config", str(every))
    assert proc.returncode == 0 and "poll every 5s)" in proc.stdout, proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("poll_interval: 5s\nevaluation_interval: 1s\n")
    proc = run_cli("check-config", str(bad))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 1  # the error line, then the hint line
    assert "evaluation_interval: must be at least poll_interval (5s)" in proc.stderr
