"""The Helm chart, rendered by the real Helm engine (helm-python-sdk) and validated like an API server would.

Every scenario in helm/specwatch/ci/*-values.yaml (chart-testing's convention) plus the defaults is:
linted strictly, rendered, parsed with yaml.safe_load_all, validated with kubernetes-validate (strict)
for built-in kinds and with the prometheus-operator CRD JSON schemas (tests/schemas/) for monitors and
rules. Then the behaviour the chart promises is asserted on the rendered objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk==0.2.2 is a test dependency")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "specwatch"
CI_DIR = CHART / "ci"
RULES_DIR = ROOT / "rules"
DASHBOARDS_DIR = ROOT / "dashboards"
CRD_SCHEMAS = Path(__file__).resolve().parents[1] / "schemas" / "monitoring.coreos.com"
KUBE_VERSION = "1.30.0"
MIN_KUBE_VERSION = "1.25.0"  # Chart.yaml kubeVersion
RELEASE, NAMESPACE = "demo", "llm"

CI_FILES = sorted(CI_DIR.glob("*-values.yaml"))
SCENARIOS = [pytest.param({}, id="defaults")] + [
    pytest.param(yaml.safe_load(p.read_text()), id=p.name) for p in CI_FILES
]
CRD_KINDS = {
    "ServiceMonitor": "servicemonitor_v1.json",
    "PodMonitor": "podmonitor_v1.json",
    "PrometheusRule": "prometheusrule_v1.json",
}
STANDALONE = {"mode": "standalone", "config": {"targets": [{"name": "vllm-0", "url": "http://vllm-0:8000/metrics"}]}}
PROMETHEUS = {"mode": "prometheus", "config": {"prometheus": {"url": "http://prometheus.monitoring.svc:9090"}}}


def ci_values(name: str) -> dict:
    return yaml.safe_load((CI_DIR / name).read_text())


def merged(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def chart():
    for needed in (RULES_DIR, DASHBOARDS_DIR):
        if not needed.is_dir():
            pytest.fail(f"{needed} is missing: helm/specwatch/sync-files copies it into the chart's files/")
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys, as the API server's strict decoding does."""


def _construct_mapping_without_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {dupes}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_without_duplicates)


def render_files(chart, values: dict, name: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    return chart.render(values, name=name, namespace=namespace)


def render(chart, values: dict, name: str = RELEASE, namespace: str = NAMESPACE) -> list[dict]:
    """All rendered Kubernetes objects (hooks included, NOTES excluded), each file parsed strictly."""
    objects = []
    for path, text in sorted(render_files(chart, values, name, namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            docs = list(yaml.load_all(text, Loader=StrictLoader))
        except yaml.YAMLError as exc:  # the engine does not parse what it renders; we must
            pytest.fail(f"{path} is not valid YAML: {exc}\n{text}")
        objects.extend(d for d in docs if d is not None)
    return objects


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    # No check_schema(): prometheusrule_v1.json has a Go-only regex that python's re refuses
    # (see tests/schemas/PROVENANCE.md); it is only compiled when that field is present.
    return jsonschema.Draft7Validator(json.loads((CRD_SCHEMAS / CRD_KINDS[kind]).read_text()))


def validation_errors(obj: dict, kube_version: str = KUBE_VERSION) -> list[str]:
    if obj["kind"] in CRD_KINDS:
        return [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator(obj["kind"]).iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(obj, kube_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.path))}: {exc.message}"]
    return []


# ---- restricted Pod Security Standard (kubernetes.io pod-security-standards, Restricted) -------------

ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod_spec: dict, only_container: str | None = None) -> list[str]:
    """Violations of the restricted profile for a pod spec, or for one container judged on its own."""
    problems = []
    psc = {} if only_container else (pod_spec.get("securityContext") or {})
    if not only_container:
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if pod_spec.get(field):
                problems.append(f"pod {field}")
        for vol in pod_spec.get("volumes", []):
            kinds = set(vol) - {"name"}
            if not kinds <= ALLOWED_VOLUME_TYPES:
                problems.append(f"volume {vol['name']} type {sorted(kinds)}")
        if psc.get("runAsUser") == 0:
            problems.append("pod runAsUser 0")
    containers = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    if only_container:
        containers = [c for c in containers if c["name"] == only_container]
        assert containers, f"no container {only_container}"
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile.type must be RuntimeDefault or Localhost, got {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps['add']}")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort")
    return problems


def test_restricted_checker_flags_each_missing_control():
    """Negative control for restricted_violations: the checker is only worth something if it can fail."""
    good = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "t", "emptyDir": {}}],
    }
    assert restricted_violations(good) == []
    mutations = {
        "seccomp": lambda s: s["securityContext"].pop("seccompProfile"),
        "nonroot": lambda s: s["securityContext"].pop("runAsNonRoot"),
        "escalation": lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "caps": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "hostpath": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "hostnetwork": lambda s: s.update(hostNetwork=True),
    }
    for label, mutate in mutations.items():
        spec = copy.deepcopy(good)
        mutate(spec)
        assert restricted_violations(spec), f"checker missed a {label} violation"


# ---- lint, render, validate every scenario ----------------------------------------------------------


@pytest.mark.parametrize("values", SCENARIOS)
def test_lint_strict_reports_no_warnings_or_errors(values):
    report = helm.lint(str(CHART), values, strict=True, kube_version=f"v{KUBE_VERSION}")
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and serious == [], report


@pytest.mark.parametrize("kube_version", [MIN_KUBE_VERSION, KUBE_VERSION])
@pytest.mark.parametrize("values", SCENARIOS)
def test_every_rendered_object_validates_against_kubernetes_or_crd_schema(chart, values, kube_version):
    objects = render(chart, values)
    assert objects, "nothing rendered"
    problems = {f"{o['kind']}/{o['metadata']['name']}": validation_errors(o, kube_version) for o in objects}
    assert {k: v for k, v in problems.items() if v} == {}


@pytest.mark.parametrize("values", SCENARIOS)
def test_every_namespaced_object_lands_in_the_release_or_configured_namespace(chart, values):
    allowed = {NAMESPACE, "monitoring"}
    for obj in render(chart, values):
        assert obj["metadata"].get("namespace") in allowed, obj["metadata"]


def test_crd_validation_rejects_a_broken_servicemonitor(chart):
    """Negative control: the CRD schemas really are strict (a typo and a bad duration are caught)."""
    sm = one(render(chart, merged(STANDALONE, {"serviceMonitor": {"enabled": True}})), "ServiceMonitor")
    assert validation_errors(sm) == []
    sm["spec"]["endpoints"][0]["intervall"] = "30s"
    sm["spec"]["endpoints"][0]["scrapeTimeout"] = "10 seconds"
    errors = " ".join(validation_errors(sm))
    assert "intervall" in errors and "10 seconds" in errors


# ---- security, probes, volumes -------------------------------------------------------------------------


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    specs = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            specs[f"Deployment/{obj['metadata']['name']}"] = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            specs[f"Pod/{obj['metadata']['name']}"] = obj["spec"]
    return specs


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(STANDALONE, id="standalone-minimal"),
        pytest.param(ci_values("standalone-values.yaml"), id="standalone-values.yaml"),
        pytest.param(ci_values("standalone-monitoring-values.yaml"), id="standalone-monitoring-values.yaml"),
        pytest.param(PROMETHEUS, id="prometheus-minimal"),
        pytest.param(ci_values("prometheus-values.yaml"), id="prometheus-values.yaml"),
    ],
)
def test_standalone_pods_pass_the_restricted_pod_security_standard(chart, values):
    specs = pod_specs(render(chart, values))
    assert {k.split("/")[0] for k in specs} == {"Deployment", "Pod"}, specs.keys()  # exporter + helm test pod
    for name, spec in specs.items():
        assert restricted_violations(spec) == [], name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert c["securityContext"]["runAsUser"] == 65534 and c["securityContext"]["runAsGroup"] == 65534


def exporter_container(spec: dict) -> dict:
    return next(c for c in spec["containers"] if c["name"] == "specwatch")


def test_exporter_container_is_hardened_with_only_a_tmpfs_writable(chart):
    deploy = one(render(chart, STANDALONE), "Deployment")
    spec = deploy["spec"]["template"]["spec"]
    container = exporter_container(spec)
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"]["medium"] == "Memory"
    assert mounts["/etc/specwatch"]["readOnly"] is True
    assert volumes[mounts["/etc/specwatch"]["name"]]["configMap"]["name"] == deploy["metadata"]["name"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"] and set(resources["limits"]) == {"cpu", "memory"}, (
        "requests == limits by default: a Guaranteed vLLM pod must stay Guaranteed"
    )
    assert not any(e["name"].lower() == "prometheus_multiproc_dir" for e in container.get("env", []))


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(STANDALONE, id="standalone"),
        pytest.param(merged(STANDALONE, {"containerPort": 9500, "portName": "metrics"}), id="custom-port"),
    ],
)
def test_probes_hit_healthz_and_readyz_on_the_exporter_port(chart, values):
    container = exporter_container(one(render(chart, values), "Deployment")["spec"]["template"]["spec"])
    port = container["ports"][0]
    assert port["containerPort"] == values.get("containerPort", 9474)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    cfg = yaml.safe_load(config_map(render(chart, values))["data"]["specwatch.yaml"])
    assert cfg["listen"] == f":{port['containerPort']}"


def test_container_runs_the_run_subcommand_with_the_mounted_config(chart):
    container = exporter_container(
        one(render(chart, merged(STANDALONE, {"extraArgs": ["--verbose"]})), "Deployment")["spec"]["template"]["spec"]
    )
    assert container["args"] == ["run", "--config", "/etc/specwatch/specwatch.yaml", "--listen", ":9474", "--verbose"]
    assert "command" not in container, "the image ENTRYPOINT (specwatch) must stay in charge"
    assert container["image"] == "specwatch/specwatch:0.1.0"


def test_image_digest_and_registry_compose_the_reference(chart):
    digest = "sha256:" + "a" * 64
    container = exporter_container(
        one(
            render(chart, merged(STANDALONE, {"image": {"registry": "ghcr.io", "tag": "0.1.1", "digest": digest}})),
            "Deployment",
        )["spec"]["template"]["spec"]
    )
    assert container["image"] == f"ghcr.io/specwatch/specwatch:0.1.1@{digest}"


def test_global_image_registry_prefixes_the_image_unless_image_registry_is_set(chart):
    def image(values: dict) -> str:
        deployment = one(render(chart, merged(STANDALONE, values)), "Deployment")
        return str(exporter_container(deployment["spec"]["template"]["spec"])["image"])

    assert image({"global": {"imageRegistry": "mirror.example:5000"}, "image": {"tag": "0.1.1"}}) == (
        "mirror.example:5000/specwatch/specwatch:0.1.1"
    )
    assert image({"global": {"imageRegistry": "mirror.example"}, "image": {"registry": "ghcr.io", "tag": "1"}}) == (
        "ghcr.io/specwatch/specwatch:1"
    )


# ---- config map and checksum ---------------------------------------------------------------------------


def config_map(objects: list[dict]) -> dict:
    (found,) = [o for o in of_kind(objects, "ConfigMap") if "specwatch.yaml" in o["data"]]
    return found


def rendered_config(objects: list[dict]) -> dict:
    return yaml.safe_load(config_map(objects)["data"]["specwatch.yaml"])


def test_config_map_carries_the_values_config_with_empty_keys_left_to_exporter_defaults(chart):
    values = ci_values("standalone-values.yaml")
    cfg = rendered_config(render(chart, values))
    expected = dict(values["config"].items())
    expected["listen"] = ":9474"
    expected["alerting"] = {"window": "5m"}  # from prometheusRule.alertWindow
    assert cfg == expected
    defaults = rendered_config(render(chart, {}))
    assert set(defaults) == {
        "listen",
        "poll_interval",
        "windows",
        "targets",
        "tensor_parallel",
        "log",
        "alerting",
        "shutdown_drain",  # sidecar mode: derived from terminationGracePeriodSeconds
    }


def test_sidecar_mode_defaults_its_target_to_vllm_on_loopback(chart):
    cfg = rendered_config(render(chart, {"sidecar": {"vllmPort": 8080}}))
    assert cfg["targets"] == [{"name": "vllm", "url": "http://127.0.0.1:8080/metrics"}]


def test_standalone_without_targets_is_refused_with_a_message_naming_the_key(chart):
    with pytest.raises(helm.HelmRenderError, match=r"config\.targets"):
        render(chart, {"mode": "standalone"})


def test_config_checksum_annotation_is_the_sha256_of_the_config_and_rolls_pods_on_change(chart):
    first = render(chart, STANDALONE)
    deploy = one(first, "Deployment")
    config_text = config_map(first)["data"]["specwatch.yaml"]
    checksum = deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum == hashlib.sha256(config_text.rstrip("\n").encode()).hexdigest()
    changed = one(render(chart, merged(STANDALONE, {"config": {"poll_interval": "10s"}})), "Deployment")
    assert changed["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != checksum
    same = one(render(chart, merged(STANDALONE, {"podLabels": {"team": "x"}})), "Deployment")
    assert same["spec"]["template"]["metadata"]["annotations"]["checksum/config"] == checksum


def exporter_config():
    """The exporter's own config parser (specwatch.config), so chart and program are checked to agree."""
    sys.path.insert(0, str(ROOT / "exporter"))
    try:
        return pytest.importorskip("specwatch.config", reason="exporter config module not present")
    finally:
        sys.path.remove(str(ROOT / "exporter"))


def notes_extra_containers(notes: str) -> list[dict]:
    match = re.search(
        r"^# --- specwatch extraContainers begin ---\n(.*?)^# --- specwatch extraContainers end ---",
        notes,
        re.DOTALL | re.MULTILINE,
    )
    assert match, notes
    return yaml.safe_load(match.group(1))["extraContainers"]


def test_rendered_config_is_accepted_by_the_exporter_config_loader(chart, tmp_path):
    """Cross-check with the exporter's own parser (specwatch.config), so chart and program agree."""
    config = exporter_config()
    model_json = tmp_path / "config.json"
    model_json.write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
                "vocab_size": 128256,
            }
        )
    )
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    for values in [{}, STANDALONE] + [ci_values(p.name) for p in CI_FILES]:
        text = config_map(render(chart, values))["data"]["specwatch.yaml"]
        raw = yaml.safe_load(text)
        if raw.get("model", {}).get("config_json"):  # the pod mounts the model volume; here a stand-in
            raw["model"]["config_json"] = str(model_json)
        if raw.get("prometheus", {}).get("bearer_token_file"):  # the pod mounts the Secret; here a stand-in
            raw["prometheus"]["bearer_token_file"] = str(token)
        path = tmp_path / "specwatch.yaml"
        path.write_text(yaml.safe_dump(raw))
        parsed = config.load(str(path), environ={"VLLM_API_KEY": "secret", "TENANT": "team-a"})
        assert parsed.listen_address[1] == 9474
        assert [t.url for t in parsed.targets] == [t["url"] for t in raw.get("targets", [])]
        assert (parsed.prometheus is None) == ("prometheus" not in raw)


# ---- defaults: opt-in features are off -----------------------------------------------------------------


def test_defaults_render_only_the_config_map_in_sidecar_mode(chart):
    assert [o["kind"] for o in render(chart, {})] == ["ConfigMap"]


def test_standalone_defaults_have_no_monitors_rules_dashboards_or_network_policy(chart):
    kinds = sorted(o["kind"] for o in render(chart, STANDALONE))
    assert kinds == ["ConfigMap", "Deployment", "Pod", "Service", "ServiceAccount"]


# ---- monitors ------------------------------------------------------------------------------------------


def test_service_monitor_selects_the_service_port_and_carries_extra_labels(chart):
    objects = render(chart, ci_values("standalone-monitoring-values.yaml"))
    sm, svc = one(objects, "ServiceMonitor"), one(objects, "Service")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # job = the Service's app.kubernetes.io/name label; SpecDecodeExporterDown selects job=~".*specwatch.*"
    job = svc["metadata"]["labels"][sm["spec"]["jobLabel"]]
    assert re.fullmatch(".*specwatch.*", job)


@pytest.mark.parametrize(
    ("interval", "timeout", "rendered"),
    [("5s", "10s", "5s"), ("1m", "10s", "10s"), ("500ms", "1s", "500ms"), ("", "10s", "10s")],
)
def test_the_scrape_timeout_is_never_above_the_scrape_interval(chart, interval, timeout, rendered):
    """Prometheus refuses a ServiceMonitor or PodMonitor whose scrapeTimeout exceeds its interval."""
    monitor = {"interval": interval, "scrapeTimeout": timeout}
    objects = render(chart, merged(ci_values("standalone-monitoring-values.yaml"), {"serviceMonitor": monitor}))
    assert one(objects, "ServiceMonitor")["spec"]["endpoints"][0]["scrapeTimeout"] == rendered
    objects = render(chart, merged(ci_values("sidecar-values.yaml"), {"podMonitor": monitor}))
    assert one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["scrapeTimeout"] == rendered


def test_pod_monitor_in_sidecar_mode_selects_the_vllm_pods_on_the_sidecar_port(chart):
    values = ci_values("sidecar-values.yaml")
    objects = render(chart, values)
    pm = one(objects, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert pm["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "vllm"}}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http-specwatch"
    assert pm["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    # Without jobLabel the job is "<namespace>/<PodMonitor name>", which SpecDecodeExporterDown's selector matches.
    assert "jobLabel" not in pm["spec"]
    assert re.fullmatch(".*specwatch.*", f"{pm['metadata']['namespace']}/{pm['metadata']['name']}")
    assert not of_kind(objects, "Deployment") and not of_kind(objects, "Service")


def test_pod_monitor_can_live_in_the_monitoring_namespace_and_watch_another(chart):
    pm = one(render(chart, ci_values("sidecar-monitoring-values.yaml")), "PodMonitor")
    assert pm["metadata"]["namespace"] == "monitoring"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["llm"]}


@pytest.mark.parametrize(
    "values, message",
    [
        ({"serviceMonitor": {"enabled": True}}, "serviceMonitor needs mode=standalone"),
        ({"podMonitor": {"enabled": True}}, "podMonitor.selectorOverride is required in sidecar mode"),
        ({"networkPolicy": {"enabled": True}}, "networkPolicy needs mode=standalone"),
    ],
)
def test_sidecar_mode_refuses_combinations_that_cannot_work(chart, values, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(chart, values)


def test_release_label_and_common_labels_reach_every_object_without_duplicate_keys(chart):
    values = merged(
        ci_values("standalone-monitoring-values.yaml"),
        {"commonLabels": {"cost-center": "ml", "app.kubernetes.io/name": "not-a-selector"}},
    )
    monitoring_kinds = {"ServiceMonitor", "PrometheusRule"}
    for obj in render(chart, values):  # render() refuses duplicate keys
        labels = obj["metadata"]["labels"]
        if obj["kind"] == "Pod":  # the helm test pod deliberately keeps a minimal label set
            continue
        # additionalLabels (release: kube-prometheus-stack) win over releaseLabel on monitors and rules.
        expected_release = "kube-prometheus-stack" if obj["kind"] in monitoring_kinds else RELEASE
        assert labels["release"] == expected_release, obj["metadata"]["name"]
        assert labels["cost-center"] == "ml", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "specwatch", "commonLabels must not override selector labels"


def test_strict_loader_rejects_duplicate_keys():
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate keys"):
        yaml.load("metadata:\n  labels:\n    release: a\n    release: b\n", Loader=StrictLoader)


# ---- PrometheusRule from rules/ ------------------------------------------------------------------------


def source_groups() -> list[dict]:
    files = sorted(p for p in RULES_DIR.glob("*.yaml"))
    assert files, "rules/*.yaml is empty"
    groups = []
    for path in files:
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return groups


def expected_groups(prometheus_rule: dict) -> list[dict]:
    """An independent model of the chart's override semantics, applied to the source rules."""
    overrides, disabled = prometheus_rule.get("alerts", {}), prometheus_rule.get("disabled", {})
    extra_labels = prometheus_rule.get("additionalRuleLabels", {})
    extra_annotations = prometheus_rule.get("additionalRuleAnnotations", {})
    groups = []
    for group in source_groups():
        rules = []
        for rule in group["rules"]:
            rule = copy.deepcopy(rule)
            if "alert" in rule:
                if disabled.get(rule["alert"]):
                    continue
                o = overrides.get(rule["alert"], {})
                for key in ("expr", "for", "keep_firing_for"):
                    if key in o:
                        rule[key] = o[key]
                for rep in o.get("exprReplace", []):
                    rule["expr"] = rule["expr"].replace(rep["old"], rep["new"])
                labels = {**extra_labels, **rule.get("labels", {}), **o.get("labels", {})}
                if "severity" in o:
                    labels["severity"] = o["severity"]
                if labels:
                    rule["labels"] = labels
                annotations = {**extra_annotations, **rule.get("annotations", {}), **o.get("annotations", {})}
                if annotations:
                    rule["annotations"] = annotations
            rules.append(rule)
        if rules:
            groups.append({**group, "rules": rules})
    return groups


def rendered_alerts(groups: list[dict]) -> dict[str, dict]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_prometheus_rule_equals_the_rules_directory_without_overrides(chart):
    pr = one(render(chart, ci_values("sidecar-monitoring-values.yaml")), "PrometheusRule")
    assert pr["spec"]["groups"] == source_groups()
    assert pr["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert pr["metadata"]["namespace"] == "monitoring"
    # Prometheus template syntax in annotations must survive Helm verbatim.
    annotations = " ".join(
        a for r in rendered_alerts(pr["spec"]["groups"]).values() for a in r.get("annotations", {}).values()
    )
    assert "{{ $labels.route }}" in annotations


def test_prometheus_rule_applies_for_severity_threshold_and_disable_overrides(chart):
    values = ci_values("standalone-monitoring-values.yaml")
    pr = one(render(chart, values), "PrometheusRule")
    assert pr["spec"]["groups"] == expected_groups(values["prometheusRule"])
    alerts = rendered_alerts(pr["spec"]["groups"])
    source = rendered_alerts(source_groups())
    assert alerts["SpecDecodeBelowBreakeven"]["for"] == "30m"
    assert alerts["SpecDecodeBelowBreakeven"]["labels"]["severity"] == "critical"
    assert "SpecDecodeShorterDraftRecommended" not in alerts
    assert "1.5 * specwatch_baseline_itl_p99_seconds" in alerts["SpecDecodeITLP99Regression"]["expr"]
    assert "1.2 *" not in alerts["SpecDecodeITLP99Regression"]["expr"]
    assert "> 600" in alerts["SpecDecodeTargetDown"]["expr"] and alerts["SpecDecodeTargetDown"]["for"] == "10m"
    assert all(a["labels"]["team"] == "inference" for a in alerts.values())
    untouched = set(source) - {
        "SpecDecodeBelowBreakeven",
        "SpecDecodeShorterDraftRecommended",
        "SpecDecodeITLP99Regression",
        "SpecDecodeTargetDown",
    }
    for name in untouched:
        assert alerts[name] == {**source[name], "labels": {**source[name]["labels"], "team": "inference"}}


def test_every_alert_for_duration_is_overridable(chart):
    names = sorted(rendered_alerts(source_groups()))
    assert {
        "SpecDecodeBelowBreakeven",
        "SpecDecodeShorterDraftRecommended",
        "SpecDecodeITLP99Regression",
        "SpecDecodeMetricsMissing",
        "SpecDecodeTargetDown",
        "SpecDecodeExporterDown",
        "SpecDecodeFleetBelowBreakeven",
        "SpecwatchConfigReloadFailed",
    } <= set(names)
    values = {"prometheusRule": {"enabled": True, "alerts": {n: {"for": "42m"} for n in names}}}
    alerts = rendered_alerts(one(render(chart, values), "PrometheusRule")["spec"]["groups"])
    assert {n: a["for"] for n, a in alerts.items()} == dict.fromkeys(names, "42m")


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"alerts": {"SpecDecodeBelowBreakEven": {"for": "1h"}}},
            'alert "SpecDecodeBelowBreakEven", which is not in rules/',
        ),
        ({"disabled": {"NoSuchAlert": True}}, 'alert "NoSuchAlert", which is not in rules/'),
        (
            {"alerts": {"SpecDecodeITLP99Regression": {"exprReplace": [{"old": "1.7 *", "new": "2 *"}]}}},
            '"1.7 *" does not occur in the expression',
        ),
    ],
)
def test_rule_overrides_that_match_nothing_fail_the_render(chart, values, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(chart, {"prometheusRule": {"enabled": True, **values}})


def write_rendered_rules(groups: list[dict], into: Path) -> None:
    """The rendered groups back into files named like rules/ (the promtool tests load ../<file>)."""
    by_file: dict[str, list[dict]] = {}
    for path in sorted(RULES_DIR.glob("*.yaml")):
        names = {g["name"] for g in yaml.safe_load(path.read_text())["groups"]}
        by_file[path.name] = [g for g in groups if g["name"] in names]
    (into / "tests").mkdir(parents=True)
    for name, file_groups in by_file.items():
        (into / name).write_text(yaml.safe_dump({"groups": file_groups}, sort_keys=False, width=1000))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_a_custom_alert_window_rewrites_every_rule_and_the_promtool_suite_passes_on_that_window(chart, tmp_path):
    """alertWindow=15m with windows [1m, 15m]: the rendered rules read window="15m" everywhere, and the
    repository's promtool cases, moved to the 15m window, pass against them, while the original 5m
    cases no longer fire (the rewrite is real)."""
    import subprocess

    values = {"config": {"windows": ["1m", "15m"]}, "prometheusRule": {"enabled": True, "alertWindow": "15m"}}
    groups = one(render(chart, values), "PrometheusRule")["spec"]["groups"]
    text = yaml.safe_dump(groups, width=1000)
    assert 'window="5m"' not in text and 'window="15m"' in text
    assert "over the last 15m" in text
    moved, original = tmp_path / "moved", tmp_path / "original"
    for target, shift in ((moved, True), (original, False)):
        write_rendered_rules(groups, target)
        for case in sorted((RULES_DIR / "tests").glob("*.yaml")):
            body = case.read_text()
            if shift:
                body = body.replace('window="5m"', 'window="15m"').replace("window: 5m", "window: 15m")
                if case.name in ("spec-decode.yaml", "fleet-labels.yaml"):  # where alert texts name the window
                    body = body.replace("the last 5m", "the last 15m")
            (target / "tests" / case.name).write_text(body)

    def run(d: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["promtool", "test", "rules", *map(str, sorted((d / "tests").glob("*.yaml")))],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    result = run(moved)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert run(original).returncode != 0, "cases on window=5m still pass: the rules were not rewritten"


def test_an_alert_window_that_is_not_a_sidecar_window_fails_the_render_naming_both_keys(chart):
    with pytest.raises(helm.HelmRenderError, match=r"prometheusRule\.alertWindow=5m is not one of config\.windows"):
        render(chart, {"config": {"windows": ["1m", "15m"]}, "prometheusRule": {"enabled": True}})


def test_the_sidecar_learns_the_alert_window_through_its_config_so_it_can_warn(chart, tmp_path):
    values = merged(STANDALONE, {"config": {"windows": ["1m", "15m"]}, "prometheusRule": {"alertWindow": "15m"}})
    objects = render(chart, values)
    assert rendered_config(objects)["alerting"] == {"window": "15m"}
    container = exporter_container(one(objects, "Deployment")["spec"]["template"]["spec"])
    assert not [e for e in container["env"] if "ALERT" in e["name"]]  # one source: the config file
    path = tmp_path / "specwatch.yaml"
    path.write_text(config_map(objects)["data"]["specwatch.yaml"])
    assert exporter_config().load(str(path), environ={}).alerting.window == 900.0


def test_the_env_only_sidecar_learns_the_alert_window_from_its_variable(chart):
    notes = render_files(chart, {"prometheusRule": {"alertWindow": "1m"}})["specwatch/templates/NOTES.txt"]
    (container,) = notes_extra_containers(notes)
    assert {"name": "SPECWATCH_ALERTING__WINDOW", "value": "1m"} in container["env"]


STOP_MARGIN = 5.0  # seconds the drain's cap ends before the grace period (exporter serve/drain.py)


@pytest.mark.parametrize("grace", [30, 10, 120, 300, 5, 0, None])
def test_the_rendered_shutdown_drain_ends_before_the_pods_termination_grace_period(chart, tmp_path, grace):
    """Never longer than the pod: the sidecar's drain cap, as the exporter reads the rendered config
    (and the env-only container's variable), ends STOP_MARGIN before terminationGracePeriodSeconds."""
    values = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    period = 30 if grace is None else grace
    files = render_files(chart, values)
    objects = render(chart, values)
    path = tmp_path / "specwatch.yaml"
    path.write_text(config_map(objects)["data"]["specwatch.yaml"])
    drain = exporter_config().load(str(path), environ={}).shutdown_drain
    assert drain + STOP_MARGIN <= period or drain == 0.0
    assert drain < period or period == 0
    assert drain == max(period - STOP_MARGIN, 0.0)  # derived: the longest drain that fits
    (container,) = notes_extra_containers(files["specwatch/templates/NOTES.txt"])
    (variable,) = [e["value"] for e in container["env"] if e["name"] == "SPECWATCH_SHUTDOWN_DRAIN"]
    config = exporter_config()
    assert config.from_mapping({}, environ={"SPECWATCH_SHUTDOWN_DRAIN": variable}).shutdown_drain == drain


@pytest.mark.parametrize(("drain", "grace"), [("1m", 30), ("25500ms", 30), (26, 30), ("10s", 12), ("1h", 600)])
def test_a_shutdown_drain_that_does_not_end_before_the_grace_period_fails_the_render(chart, drain, grace):
    values = {"terminationGracePeriodSeconds": grace, "config": {"shutdown_drain": drain}}
    with pytest.raises(
        helm.HelmRenderError,
        match=rf"config\.shutdown_drain={drain} does not end 5s before terminationGracePeriodSeconds={grace}",
    ):
        render(chart, values)


@pytest.mark.parametrize(("drain", "grace", "seconds"), [("20s", 30, 20.0), (0, 30, 0.0), ("1m", 300, 60.0)])
def test_a_shutdown_drain_that_fits_the_grace_period_is_rendered_as_given(chart, tmp_path, drain, grace, seconds):
    for mode in ({}, STANDALONE):
        values = merged(mode, {"terminationGracePeriodSeconds": grace, "config": {"shutdown_drain": drain}})
        path = tmp_path / "specwatch.yaml"
        path.write_text(config_map(render(chart, values))["data"]["specwatch.yaml"])
        assert exporter_config().load(str(path), environ={}).shutdown_drain == seconds
    deployment = one(render(chart, merged(STANDALONE, {"terminationGracePeriodSeconds": grace})), "Deployment")
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace


def test_an_alerting_window_in_the_config_values_that_disagrees_with_the_rules_fails_the_render(chart):
    values = {"config": {"alerting": {"window": "1m"}}, "prometheusRule": {"alertWindow": "5m"}}
    with pytest.raises(
        helm.HelmRenderError, match=r"config\.alerting\.window=1m differs from prometheusRule\.alertWindow"
    ):
        render(chart, values)
    agreeing = render(chart, {"config": {"alerting": {"window": "5m"}}})
    assert rendered_config(agreeing)["alerting"] == {"window": "5m"}


def test_runbook_url_base_is_one_value(chart):
    values = {"prometheusRule": {"enabled": True, "runbookUrl": "https://wiki.example.com/runbooks/specwatch#"}}
    alerts = rendered_alerts(one(render(chart, values), "PrometheusRule")["spec"]["groups"])
    assert {a["annotations"]["runbook_url"] for a in alerts.values()} == {
        f"https://wiki.example.com/runbooks/specwatch#{name.lower()}" for name in alerts
    }


def test_monitors_carry_tls_auth_and_scrape_limits_and_validate_against_the_crds(chart):
    extra = {
        "scheme": "https",
        "tlsConfig": {"serverName": "specwatch", "ca": {"configMap": {"name": "ca", "key": "ca.crt"}}},
        "basicAuth": {"username": {"name": "scrape", "key": "user"}, "password": {"name": "scrape", "key": "pass"}},
        "sampleLimit": 6000,
        "labelLimit": 30,
    }
    sidecar = merged(ci_values("sidecar-values.yaml"), {"podMonitor": extra})
    standalone = merged(
        STANDALONE,
        {
            "serviceMonitor": {
                "enabled": True,
                **extra,
                "basicAuth": {},
                "authorization": {"type": "Bearer", "credentials": {"name": "t", "key": "token"}},
            }
        },
    )
    for values, kind, endpoints in (
        (sidecar, "PodMonitor", "podMetricsEndpoints"),
        (standalone, "ServiceMonitor", "endpoints"),
    ):
        monitor = one(render(chart, values), kind)
        assert validation_errors(monitor) == []
        assert monitor["spec"]["sampleLimit"] == 6000 and monitor["spec"]["labelLimit"] == 30
        endpoint = monitor["spec"][endpoints][0]
        assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["serverName"] == "specwatch"
        assert ("basicAuth" in endpoint) == (kind == "PodMonitor")
        assert ("authorization" in endpoint) == (kind == "ServiceMonitor")
    plain = one(render(chart, ci_values("sidecar-values.yaml")), "PodMonitor")
    assert "sampleLimit" not in plain["spec"] and "tlsConfig" not in plain["spec"]["podMetricsEndpoints"][0]


def test_extra_objects_render_objects_and_templated_strings(chart):
    values = {
        "extraObjects": [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "{{ .Release.Name }}-scrape"},
                "stringData": {"user": "prometheus"},
            },
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-extra\ndata: {a: b}\n",
        ]
    }
    objects = render(chart, values)
    assert one(objects, "Secret")["metadata"]["name"] == f"{RELEASE}-scrape"
    names = {o["metadata"]["name"] for o in of_kind(objects, "ConfigMap")}
    assert f"{RELEASE}-extra" in names


def test_chart_metadata_names_home_sources_and_maintainers():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["home"].startswith("https://") and meta["sources"] and meta["maintainers"][0]["name"]


# ---- dashboards from dashboards/ -----------------------------------------------------------------------


def test_dashboard_config_maps_equal_the_dashboards_directory(chart):
    sources = sorted(DASHBOARDS_DIR.glob("*.json"))
    assert sources, "dashboards/*.json is empty"
    values = ci_values("standalone-monitoring-values.yaml")
    maps = [o for o in of_kind(render(chart, values), "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]
    assert len(maps) == len(sources)
    by_key = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
        ((key, text),) = cm["data"].items()
        by_key[key] = text
    for src in sources:
        assert by_key[src.name] == src.read_text().rstrip("\n"), f"{src.name} differs from the packaged copy"
        assert json.loads(by_key[src.name]) == json.loads(src.read_text())
        assert len(by_key[src.name].encode()) < 1_000_000, "a ConfigMap holds at most 1 MiB"


# ---- NetworkPolicy ---------------------------------------------------------------------------------------


def test_network_policy_is_ingress_only_from_prometheus_and_the_helm_test_pod(chart):
    objects = render(chart, ci_values("standalone-monitoring-values.yaml"))
    policy, deploy, test_pod = one(objects, "NetworkPolicy"), one(objects, "Deployment"), one(objects, "Pod")
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress must stay open to reach vLLM"
    assert policy["spec"]["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    port_name = exporter_container(deploy["spec"]["template"]["spec"])["ports"][0]["name"]
    prom_rule, test_rule = policy["spec"]["ingress"]
    assert prom_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    assert prom_rule["ports"] == [{"port": port_name, "protocol": "TCP"}]
    assert test_rule["from"][0]["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()


# ---- helm test hook ------------------------------------------------------------------------------------


def test_helm_test_pod_checks_readyz_through_the_service(chart):
    objects = render(chart, STANDALONE)
    pod, svc = one(objects, "Pod"), one(objects, "Service")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    url = pod["spec"]["containers"][0]["command"][-1]
    assert url == f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{svc['spec']['ports'][0]['port']}/readyz"
    # The Service must never route scrapes to the test pod.
    assert not svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_helm_test_script_exits_zero_only_for_a_ready_endpoint(chart, tmp_path):
    """Run the test pod's own script against a loopback server: 200 passes, 503 fails."""
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    script = one(render(chart, STANDALONE), "Pod")["spec"]["containers"][0]["command"][2]
    status = {"code": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status["code"] if self.path == "/readyz" else 404)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/readyz"
    try:
        ok = subprocess.run(
            [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=30, check=False
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        status["code"] = 503
        fast = script.replace("time.sleep(3)", "time.sleep(0)")
        bad = subprocess.run([sys.executable, "-c", fast, url], capture_output=True, text=True, timeout=30, check=False)
        assert bad.returncode == 1, bad.stdout + bad.stderr
    finally:
        server.shutdown()


def test_sidecar_mode_has_a_helm_test_only_when_given_a_url(chart):
    assert not of_kind(render(chart, {}), "Pod")
    pod = one(render(chart, {"testFramework": {"url": "http://vllm-0.vllm:9474/readyz"}}), "Pod")
    assert pod["spec"]["containers"][0]["command"][-1] == "http://vllm-0.vllm:9474/readyz"


# ---- prometheus (fleet) mode ---------------------------------------------------------------------------

PROMETHEUS_MODE_KINDS = {
    "ConfigMap",
    "Deployment",
    "Service",
    "ServiceAccount",
    "Pod",
    "ServiceMonitor",
    "PrometheusRule",
    "NetworkPolicy",
}


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(PROMETHEUS, id="minimal"),
        pytest.param(ci_values("prometheus-values.yaml"), id="prometheus-values.yaml"),
    ],
)
def test_prometheus_mode_runs_one_exporter_deployment_that_validates_and_touches_no_vllm_pod(chart, values):
    objects = render(chart, values)
    assert {o["kind"] for o in objects} <= PROMETHEUS_MODE_KINDS
    problems = {f"{o['kind']}/{o['metadata']['name']}": validation_errors(o) for o in objects}
    assert {k: v for k, v in problems.items() if v} == {}
    deploy = one(objects, "Deployment")
    assert deploy["spec"]["replicas"] == 1
    spec = deploy["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["specwatch"]
    assert exporter_container(spec)["image"].startswith("specwatch/specwatch:")
    assert exporter_container(spec)["readinessProbe"]["httpGet"]["path"] == "/readyz"  # its own pod: gated
    chart_pods = {"app.kubernetes.io/name": "specwatch", "app.kubernetes.io/instance": RELEASE}
    # Everything that selects pods selects this chart's exporter, never a vLLM pod.
    assert deploy["spec"]["selector"]["matchLabels"] == chart_pods
    assert one(objects, "Service")["spec"]["selector"] == chart_pods
    for monitor in of_kind(objects, "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"] == chart_pods
    for policy in of_kind(objects, "NetworkPolicy"):
        assert policy["spec"]["podSelector"]["matchLabels"] == chart_pods
    notes = render_files(chart, values)["specwatch/templates/NOTES.txt"]
    assert "sidecar patch begin" not in notes and "extraContainers" not in notes


def test_prometheus_mode_config_passes_the_prometheus_section_through_and_has_no_targets(chart, tmp_path):
    values = ci_values("prometheus-values.yaml")
    raw = rendered_config(render(chart, values))
    assert "targets" not in raw
    given = values["config"]["prometheus"]
    assert raw["prometheus"] == {**given, "bearer_token_file": "/var/run/secrets/specwatch/prometheus/token"}
    assert raw["routes"] == values["config"]["routes"]
    minimal = rendered_config(render(chart, PROMETHEUS))
    assert "targets" not in minimal and minimal["prometheus"] == PROMETHEUS["config"]["prometheus"]
    path = tmp_path / "specwatch.yaml"
    path.write_text(yaml.safe_dump(minimal))
    parsed = exporter_config().load(str(path), environ={})
    assert parsed.targets == () and parsed.prometheus.url == "http://prometheus.monitoring.svc:9090"


def test_the_bearer_token_secret_is_mounted_read_only_as_the_bearer_token_file_and_can_rotate(chart):
    objects = render(chart, merged(PROMETHEUS, {"prometheus": {"bearerTokenSecret": {"name": "reader", "key": "jwt"}}}))
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "prometheus-token"]
    assert volume["secret"] == {
        "secretName": "reader",
        "items": [{"key": "jwt", "path": "token"}],
        "defaultMode": 0o440,
    }
    (mount,) = [m for m in exporter_container(spec)["volumeMounts"] if m["name"] == "prometheus-token"]
    # A directory mount, not subPath: the kubelet swaps in a rotated Secret, and the file is re-read per query.
    assert mount == {"name": "prometheus-token", "mountPath": "/var/run/secrets/specwatch/prometheus", "readOnly": True}
    assert rendered_config(objects)["prometheus"]["bearer_token_file"] == mount["mountPath"] + "/token"
    assert spec["securityContext"]["fsGroup"] == exporter_container(spec)["securityContext"]["runAsGroup"]
    without = one(render(chart, PROMETHEUS), "Deployment")["spec"]["template"]["spec"]
    assert "prometheus-token" not in {v["name"] for v in without["volumes"]}
    assert "bearer_token_file" not in rendered_config(render(chart, PROMETHEUS))["prometheus"]


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"mode": "prometheus"},
            r"mode=prometheus reads every vLLM replica from Prometheus: set config\.prometheus\.url",
        ),
        (
            merged(PROMETHEUS, {"config": {"targets": [{"url": "http://vllm-0:8000/metrics"}]}}),
            r"config\.targets is not used in mode=prometheus",
        ),
        (
            merged(STANDALONE, {"config": {"prometheus": {"url": "http://p:9090"}}}),
            r"config\.prometheus \(fleet mode\) needs mode=prometheus, not mode=standalone",
        ),
        ({"config": {"prometheus": {"url": "http://p:9090"}}}, r"needs mode=prometheus, not mode=sidecar"),
        (
            merged(STANDALONE, {"prometheus": {"bearerTokenSecret": {"name": "t"}}}),
            r"prometheus\.bearerTokenSecret .* needs mode=prometheus",
        ),
        (
            merged(
                PROMETHEUS,
                {
                    "prometheus": {"bearerTokenSecret": {"name": "t"}},
                    "config": {"prometheus": {"bearer_token_file": "/t"}},
                },
            ),
            r"prometheus\.bearerTokenSecret or config\.prometheus\.bearer_token_file, not both",
        ),
        (
            merged(
                PROMETHEUS,
                {
                    "prometheus": {"bearerTokenSecret": {"name": "t"}},
                    "config": {"prometheus": {"headers": {"authorization": "Bearer x"}}},
                },
            ),
            r"config\.prometheus\.headers\.Authorization, not both",
        ),
    ],
)
def test_prometheus_mode_refuses_combinations_that_cannot_work_naming_the_keys(chart, values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render(chart, values)


@pytest.mark.parametrize(
    "values, honored",
    [
        (merged(PROMETHEUS, {"serviceMonitor": {"enabled": True}}), True),
        (merged(PROMETHEUS, {"serviceMonitor": {"enabled": True, "honorLabels": False}}), False),
        (merged(STANDALONE, {"serviceMonitor": {"enabled": True}}), False),
        (merged(STANDALONE, {"serviceMonitor": {"enabled": True, "honorLabels": True}}), True),
    ],
)
def test_the_service_monitor_keeps_the_replica_labels_by_default_only_in_prometheus_mode(chart, values, honored):
    monitor = one(render(chart, values), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is honored
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_prometheus_mode_notes_name_the_query_api_and_the_replica_labels(chart):
    notes = render_files(chart, ci_values("prometheus-values.yaml"))["specwatch/templates/NOTES.txt"]
    assert "http://prometheus-operated.monitoring.svc:9090" in notes
    assert 'matching {namespace="llm", job="vllm"}' in notes
    assert "one replica per distinct (namespace, pod)" in notes
    assert "polls no vLLM" in notes and "Secret prometheus-reader-token" in notes
    bare = render_files(chart, PROMETHEUS)["specwatch/templates/NOTES.txt"]
    assert "(instance)" in bare and "serviceMonitor.enabled=true" in bare


# ---- schema refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, where, why",
    [
        ({"mode": "daemonset"}, "/mode", "value must be one of 'sidecar', 'standalone'"),
        ({"config": {"poll_interval": "5 seconds"}}, "/config/poll_interval", "does not match pattern"),
        ({"config": {"pol_interval": "5s"}}, "/config", "'pol_interval' not allowed"),
        ({"securityContext": {"runAsNonRoot": False}}, "/securityContext/runAsNonRoot", "value must be true"),
        (
            {"extraEnv": [{"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/tmp"}]},
            "/extraEnv/0/name",
            "multiprocess mode",
        ),
        (
            {"prometheusRule": {"alerts": {"SpecDecodeTargetDown": {"severity": "page"}}}},
            "/prometheusRule/alerts/SpecDecodeTargetDown/severity",
            "critical",
        ),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", "Always"),
        ({"portName": "http-specwatch-metrics"}, "/portName", "does not match pattern"),
        ({"config": {"targets": [{"name": "x", "url": "file:///etc/passwd"}]}}, "/config/targets/0/url", "pattern"),
    ],
)
def test_schema_refuses_a_bad_value_with_a_message_naming_it(chart, values, where, why):
    with pytest.raises(helm.HelmValuesError) as err:
        render(chart, values)
    message = str(err.value)
    assert f"at '{where}'" in message and why in message, message


def test_schema_accepts_every_ci_scenario_and_the_defaults(chart):
    for values in [{}] + [ci_values(p.name) for p in CI_FILES]:
        chart.validate_schema(chart.merge_values(values))


# ---- sidecar usage from another chart and by patch -----------------------------------------------------

HOST_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-vllm
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: vllm}
  template:
    metadata:
      labels: {app.kubernetes.io/name: vllm}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.0
          args: [--model, /models/llama, --port, "8000"]
          ports: [{name: http, containerPort: 8000}]
          volumeMounts: [{name: models, mountPath: /models}]
        - {{ include "specwatch.sidecarContainer" .Subcharts.specwatch | indent 10 | trim }}
      volumes:
        - name: models
          persistentVolumeClaim: {claimName: models}
        {{- include "specwatch.sidecarVolumes" .Subcharts.specwatch | nindent 8 }}
"""


def test_host_chart_includes_the_sidecar_named_templates_from_the_dependency(tmp_path):
    """A tiny host chart with specwatch as a dependency, as the chart README tells users to write it."""
    host = tmp_path / "vllm-host"
    (host / "templates").mkdir(parents=True)
    (host / "charts").mkdir()
    (host / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "vllm-host",
                "version": "0.1.0",
                "dependencies": [{"name": "specwatch", "version": "0.1.0"}],
            }
        )
    )
    (host / "values.yaml").write_text(yaml.safe_dump({"specwatch": ci_values("sidecar-values.yaml")}))
    (host / "templates" / "deployment.yaml").write_text(HOST_DEPLOYMENT)
    shutil.copytree(CHART, host / "charts" / "specwatch", symlinks=False)
    with helm.Chart.load(str(host)) as loaded:
        files = loaded.render({}, name=RELEASE, namespace=NAMESPACE)
    objects = [d for p, t in files.items() if not p.endswith("NOTES.txt") for d in yaml.safe_load_all(t) if d]
    deploy, cm = one(objects, "Deployment"), config_map(objects)
    assert validation_errors(deploy) == []
    spec = deploy["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["vllm", "specwatch"]
    # The vLLM container is not ours to judge; the sidecar must be restricted-compliant on its own.
    assert restricted_violations(spec, only_container="specwatch") == []
    sidecar = exporter_container(spec)
    assert {m["name"] for m in sidecar["volumeMounts"]} == {"specwatch-config", "specwatch-tmp", "models"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["specwatch-config"]["configMap"]["name"] == cm["metadata"]["name"]
    assert "annotations" not in deploy["spec"]["template"]["metadata"], "a config change must not roll vLLM"
    assert_never_gates_vllm_readiness(sidecar)
    assert (
        one(objects, "PodMonitor")["spec"]["selector"]["matchLabels"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def strategic_merge(base: dict, patch: dict) -> dict:
    """Strategic-merge semantics for what the patch touches: maps merge, containers/volumes merge by name.
    An emulation (it keeps the base's order; the real merge puts new items first): the real
    `kubectl patch` and `kubectl kustomize` run in tests/deploy/test_chart_injection.py."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value)
        elif key in ("containers", "volumes", "imagePullSecrets") and isinstance(value, list):
            items = {i["name"]: i for i in out.get(key, [])}
            for item in value:
                items[item["name"]] = strategic_merge(items.get(item["name"], {}), item)
            out[key] = list(items.values())
        else:
            out[key] = copy.deepcopy(value)
    return out


def assert_never_gates_vllm_readiness(container: dict) -> None:
    """A pod is Ready only when every container is: the sidecar must have no probe that a config or
    vLLM problem can fail, and must run in sidecar mode (never exits on a bad config)."""
    assert "readinessProbe" not in container and "startupProbe" not in container
    # Nor a liveness probe by default: one payload shape could restart every sidecar at once, and a
    # restarting container makes its pod NotReady (a poll-loop bug is recovered in process).
    assert "livenessProbe" not in container
    assert {"name": "SPECWATCH_MODE", "value": "sidecar"} in container["env"]
    listen = container["args"][container["args"].index("--listen") + 1]
    assert listen == f":{container['ports'][0]['containerPort']}", "the probe must find it even without a config"


def sidecar_patch(chart, values: dict) -> dict:
    notes = render_files(chart, values)["specwatch/templates/NOTES.txt"]
    match = re.search(
        r"^# --- specwatch sidecar patch begin ---\n(.*?)^# --- specwatch sidecar patch end ---",
        notes,
        re.DOTALL | re.MULTILINE,
    )
    assert match, notes
    return yaml.safe_load(match.group(1))


# Minimal Deployments of the shapes specwatch meets. Only the parts a patch can collide with are kept.
VLLM_EXAMPLE_CHART = {  # vLLM's examples/online_serving/chart-helm: one "vllm" container, a PVC at /data
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "demo-deployment-vllm", "namespace": NAMESPACE},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"environment": "test", "release": "test"}},
        "template": {
            "metadata": {"labels": {"environment": "test", "release": "test"}},
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.11.0",
                        "ports": [{"name": "container-port", "containerPort": 8000}],
                        "resources": {
                            "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                        },
                        "volumeMounts": [{"name": "demo-storage", "mountPath": "/data"}],
                    }
                ],
                "volumes": [{"name": "demo-storage", "persistentVolumeClaim": {"claimName": "demo-storage-claim"}}],
            },
        },
    },
}
# vllm-project/production-stack: "<release>-<model>-deployment-vllm", pull secret, no replicas under KEDA
PRODUCTION_STACK = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "vllm-llama3-deployment-vllm", "namespace": NAMESPACE},
    "spec": {
        "selector": {"matchLabels": {"model": "llama3", "helm-release-name": "vllm"}},
        "template": {
            "metadata": {"labels": {"model": "llama3", "helm-release-name": "vllm"}},
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.11.0",
                        "ports": [{"name": "container-port", "containerPort": 8000}],
                        "volumeMounts": [{"name": "vllm-storage", "mountPath": "/data"}],
                    }
                ],
                "imagePullSecrets": [{"name": "vllm-registry"}],
                "volumes": [
                    {"name": "vllm-storage", "persistentVolumeClaim": {"claimName": "vllm-llama3-storage-claim"}}
                ],
            },
        },
    },
}


@pytest.mark.parametrize(
    "vllm",
    [pytest.param(VLLM_EXAMPLE_CHART, id="vllm-example-chart"), pytest.param(PRODUCTION_STACK, id="production-stack")],
)
def test_notes_print_a_patch_that_adds_a_valid_sidecar_to_an_existing_vllm_deployment(chart, vllm):
    values = merged(
        ci_values("sidecar-values.yaml"),
        {"imagePullSecrets": [{"name": "specwatch-registry"}], "extraVolumeMounts": []},
    )
    patch = sidecar_patch(chart, values)
    # Only the static default-container annotation: nothing that changes with the config rolls vLLM.
    assert patch["spec"]["template"]["metadata"] == {"annotations": {"kubectl.kubernetes.io/default-container": "vllm"}}
    patched = strategic_merge(vllm, patch)
    assert validation_errors(patched) == []
    spec = patched["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["vllm", "specwatch"]
    assert spec["containers"][0] == vllm["spec"]["template"]["spec"]["containers"][0], "vLLM's container is untouched"
    assert restricted_violations(spec, only_container="specwatch") == []
    mounts = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
    assert mounts <= {v["name"] for v in spec["volumes"]}, "every mount has a volume after the patch"
    secrets = [s["name"] for s in spec["imagePullSecrets"]]
    assert "specwatch-registry" in secrets
    assert set(secrets) >= {s["name"] for s in vllm["spec"]["template"]["spec"].get("imagePullSecrets", [])}
    sidecar = exporter_container(spec)
    assert_never_gates_vllm_readiness(sidecar)
    assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"], "keeps a Guaranteed vLLM pod Guaranteed"


def test_notes_print_an_extra_containers_entry_that_fits_the_vllm_example_chart_without_volumes(chart):
    """vLLM's example chart appends `extraContainers` to its pod but offers no extra volumes: the entry
    needs none, runs in sidecar mode with no config file, and targets vLLM's port on loopback."""
    values = merged(ci_values("sidecar-values.yaml"), {"extraVolumeMounts": [], "sidecar": {"vllmPort": 8080}})
    extra = notes_extra_containers(render_files(chart, values)["specwatch/templates/NOTES.txt"])
    vllm = copy.deepcopy(VLLM_EXAMPLE_CHART)
    vllm["spec"]["template"]["spec"]["containers"] += extra  # what the chart's template does with them
    assert validation_errors(vllm) == []
    (sidecar,) = extra
    assert "volumeMounts" not in sidecar and "--config" not in sidecar["args"]
    assert {"name": "SPECWATCH_TARGET_URL", "value": "http://127.0.0.1:8080/metrics"} in sidecar["env"]
    assert_never_gates_vllm_readiness(sidecar)
    assert restricted_violations(vllm["spec"]["template"]["spec"], only_container="specwatch") == []


def test_sidecar_patch_carries_no_pull_secrets_when_none_are_set(chart):
    assert "imagePullSecrets" not in sidecar_patch(chart, ci_values("sidecar-values.yaml"))["spec"]["template"]["spec"]


def test_standalone_keeps_its_readiness_probe_and_liveness_can_be_disabled(chart):
    container = exporter_container(one(render(chart, STANDALONE), "Deployment")["spec"]["template"]["spec"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "SPECWATCH_MODE", "value": "standalone"} in container["env"]
    off = exporter_container(
        one(render(chart, merged(STANDALONE, {"livenessProbe": {"enabled": False}})), "Deployment")["spec"]["template"][
            "spec"
        ]
    )
    assert "livenessProbe" not in off


def test_no_config_checksum_reaches_a_vllm_pod_from_any_sidecar_hook(chart):
    files = render_files(chart, ci_values("sidecar-values.yaml"))
    assert "checksum" not in files["specwatch/templates/NOTES.txt"]


# ---- packaging -----------------------------------------------------------------------------------------


def test_packaged_chart_contains_rules_and_dashboards_but_not_promtool_tests(chart, tmp_path):
    chart.save(str(tmp_path))
    (archive,) = tmp_path.glob("specwatch-*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    packaged_rules = sorted(Path(n).name for n in names if "/files/rules/" in n)
    assert packaged_rules == sorted(p.name for p in RULES_DIR.glob("*.yaml"))
    assert sorted(Path(n).name for n in names if "/files/dashboards/" in n and n.endswith(".json")) == sorted(
        p.name for p in DASHBOARDS_DIR.glob("*.json")
    )
    assert not [n for n in names if "/files/rules/tests" in n]
    assert not [n for n in names if "/ci/" in n]


def test_chart_kube_version_floor_is_the_one_validated():
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == f">={MIN_KUBE_VERSION}-0"


def test_chart_app_version_matches_the_python_package_version():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart_meta["appVersion"] == project["version"]


def test_readme_parameter_table_has_a_row_for_every_value_and_no_row_for_a_missing_one():
    def leaves(node, prefix=""):
        if isinstance(node, dict) and node:
            for key, value in node.items():
                yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix.rstrip(".")

    def exists(path):
        node = values
        for name in path.split("."):
            if not isinstance(node, dict) or name not in node:
                return False
            node = node[name]
        return True

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    # The chart's own values come from values.yaml's comments, the config table from the exporter's
    # config declarations (tools/gen_chart_readme.py); a row may stand for a whole mapping.
    chart_table, config_table = readme.split("\n## Parameters\n", 1)[1].split("\n### `config`", 1)
    table_keys = set(re.findall(r"^\| `([^`]+)` \|", chart_table, re.MULTILINE))
    config_keys = set(re.findall(r"^\| `([^`]+)` \|", config_table, re.MULTILINE))
    documented = set(leaves(values))
    config_values = {key for key in documented if key.startswith("config.")}
    rowless = {
        key
        for key in documented - config_values
        if not any(key == row or key.startswith(row + ".") for row in table_keys)
    }
    assert rowless == set(), "values missing from the README parameter table"
    assert {row for row in table_keys if not exists(row)} == set(), "README documents values that do not exist"
    undocumented = {
        key for key in config_values if not any(k == key or k.startswith((key + ".", key + "[]")) for k in config_keys)
    }
    assert undocumented == set(), "config values missing from the README config table"


def test_values_examples_in_the_readme_render_against_the_current_rules(chart):
    """Every YAML block marked <!-- values-example --> in the chart README is valid, current advice."""
    readme = (CHART / "README.md").read_text()
    blocks = re.findall(r"<!-- values-example -->\n```yaml\n(.*?)```", readme, re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        values = yaml.safe_load(block)
        values = values.get("specwatch", values)  # the host-chart example nests them under its dependency
        objects = render(chart, values)
        assert all(validation_errors(o) == [] for o in objects)


def test_named_templates_the_readme_offers_exist_in_the_chart():
    readme = (CHART / "README.md").read_text()
    offered = set(re.findall(r'include "(specwatch\.[A-Za-z]+)"', readme))
    defined = set(re.findall(r'define "(specwatch\.[A-Za-z]+)"', (CHART / "templates" / "_helpers.tpl").read_text()))
    assert {"specwatch.sidecarContainer", "specwatch.sidecarVolumes"} <= offered
    assert offered <= defined


def test_real_exporter_started_like_the_chart_container_passes_the_probes_and_the_helm_test(chart, tmp_path):
    """Run `specwatch` with the container's args and the chart's rendered config (target pointing at a
    closed port: vLLM is down). /readyz must still turn 200 (readiness never depends on vLLM), /healthz
    must be 200, the helm test pod's script must pass, and SIGTERM must stop it promptly."""
    import signal
    import subprocess
    import time
    import urllib.error
    import urllib.request

    if not (ROOT / "exporter" / "specwatch" / "service.py").exists():
        pytest.skip("exporter service not present")

    from support.loopback import free_port

    port, dead_port = free_port(), free_port()
    values = merged(
        STANDALONE,
        {
            "containerPort": port,
            "config": {
                "poll_interval": "1s",
                "targets": [{"name": "vllm-0", "url": f"http://127.0.0.1:{dead_port}/metrics", "timeout": "500ms"}],
            },
        },
    )
    objects = render(chart, values)
    container = exporter_container(one(objects, "Deployment")["spec"]["template"]["spec"])
    config_file = tmp_path / "specwatch.yaml"
    config_file.write_text(config_map(objects)["data"]["specwatch.yaml"])
    args = [str(config_file) if a == "/etc/specwatch/specwatch.yaml" else a for a in container["args"]]
    env = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(
        {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "exporter"), "NO_PROXY": "*"}
    )
    code = "import sys; from specwatch.cli.main import main; sys.argv = ['specwatch'] + sys.argv[1:]; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def get(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    try:
        deadline = time.monotonic() + 20
        while get(container["readinessProbe"]["httpGet"]["path"]) != 200:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "never became ready while vLLM was down"
            time.sleep(0.2)
        assert get(container["livenessProbe"]["httpGet"]["path"]) == 200
        script = one(objects, "Pod")["spec"]["containers"][0]["command"][2]
        test_run = subprocess.run(
            [sys.executable, "-c", script, f"http://127.0.0.1:{port}/readyz"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert test_run.returncode == 0, test_run.stdout + test_run.stderr
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _fleet_container(objects: list[dict]) -> dict:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize(("replicas", "memory"), [(1000, "314Mi"), (100, "89Mi"), (16, "68Mi"), (5000, "1314Mi")])
def test_fleet_mode_sizes_its_memory_from_the_replicas_it_reads(chart, replicas, memory):
    """64 MiB + 64 KiB per replica (1.5x the 42 KiB per replica measured by bench/fleet.py) + 192 KiB
    per replica for the history read at start (fleet/history.py HISTORY_BYTES_PER_REPLICA)."""
    values = {**PROMETHEUS, "prometheus": {"expectedReplicas": replicas}}
    resources = _fleet_container(render(chart, values))["resources"]
    assert resources["limits"]["memory"] == resources["requests"]["memory"] == memory
    assert resources["limits"]["cpu"] == resources["requests"]["cpu"]


def test_fleet_mode_takes_explicit_resources_and_other_modes_keep_theirs(chart):
    explicit = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}
    fleet = _fleet_container(render(chart, {**PROMETHEUS, "prometheus": {"resources": explicit}}))
    assert fleet["resources"] == explicit
    standalone = {"mode": "standalone", "config": {"targets": [{"name": "a", "url": "http://vllm-0:8000/metrics"}]}}
    assert _fleet_container(render(chart, standalone))["resources"]["limits"]["memory"] == "128Mi"


def test_the_chart_readme_lists_every_hardware_preset_the_cost_model_has():
    from specwatch.costmodel.hardware import HARDWARE_PRESETS

    readme = (CHART / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith("| `config.hardware.preset` |")]
    listed = set(row.split("one of ", 1)[1].split(" |", 1)[0].split(", "))
    assert listed == set(HARDWARE_PRESETS)
