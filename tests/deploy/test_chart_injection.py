"""Adding the sidecar to a vLLM Deployment with the real tools: `kubectl patch --local --type strategic`,
`kubectl kustomize` with the shipped Component, the shipped Helm post-renderer (run as Helm 3 runs it,
and as a Helm 4 postrenderer/v1 plugin through the Helm engine), on Deployments of the two vLLM charts'
shapes (tests/deploy/fixtures). Each time: specwatch is added after vLLM, vLLM stays the default
container, and nothing else of the object changes. Also: the Guaranteed-QoS render check, the native
sidecar, the fleet Deployment's strategy, and the packaged chart rendering from its .tgz alone.

    python tests/deploy/test_chart_injection.py --write   # regenerate helm/specwatch/kustomize/specwatch-patch.yaml
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "specwatch"
COMPONENT = CHART / "kustomize"
COMPONENT_PATCH = COMPONENT / "specwatch-patch.yaml"
POST_RENDERER_DIR = CHART / "post-renderer"
POST_RENDERER = POST_RENDERER_DIR / "specwatch-post-renderer"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KUBE_VERSION = "1.30.0"
KUBECTL = shutil.which("kubectl")
BEGIN, END = "# --- specwatch sidecar patch begin ---", "# --- specwatch sidecar patch end ---"
COMPONENT_HEADER = (
    '# Generated from the chart (NOTES, release "specwatch", default values) by\n'
    "# `python tests/deploy/test_chart_injection.py --write`: do not edit.\n"
)

VLLM_DEPLOYMENTS = {
    "production-stack": FIXTURES / "production-stack-deployment.yaml",
    "vllm-example-chart": FIXTURES / "vllm-example-chart-deployment.yaml",
}
SPECWATCH_VOLUMES = {"specwatch-config", "specwatch-tmp"}
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


def _helm():
    return pytest.importorskip("helm_python", reason="helm-python-sdk==0.2.2 is a test dependency")


def render_files(values: dict, release: str = "specwatch", chart_path: Path = CHART) -> dict[str, str]:
    helm = _helm()
    with helm.Chart.load(str(chart_path)) as chart:
        return chart.render(values, name=release, namespace="llm")


def notes_patch_text(values: dict, release: str = "specwatch") -> str:
    """The patch exactly as the NOTES' own `sed` command extracts it (markers included)."""
    notes = render_files(values, release)["specwatch/templates/NOTES.txt"]
    match = re.search(rf"^{re.escape(BEGIN)}\n.*?^{re.escape(END)}\n?", notes, re.DOTALL | re.MULTILINE)
    assert match, notes
    return match.group(0).rstrip("\n") + "\n"


def component_patch_text() -> str:
    return COMPONENT_HEADER + notes_patch_text({})


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def need_kubectl() -> str:
    if not KUBECTL:
        pytest.skip("kubectl (with kustomize built in) is not installed")
    return KUBECTL


def run(cmd: list[str], **kwargs) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, **kwargs)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}"
    return proc.stdout


def validation_errors(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.path))}: {exc.message}"]
    return []


def without_specwatch(obj: dict) -> dict:
    """The object with what the patch adds taken out again: the rest must equal the original."""
    out = copy.deepcopy(obj)
    template = out["spec"]["template"]
    annotations = template["metadata"].get("annotations", {})
    annotations.pop(DEFAULT_CONTAINER, None)
    if not annotations:
        template["metadata"].pop("annotations", None)
    spec = template["spec"]
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [c for c in spec[key] if c["name"] != "specwatch"]
            if not spec[key]:
                del spec[key]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in SPECWATCH_VOLUMES]
    return out


def assert_injected(patched: dict, original: dict, native: bool = False) -> dict:
    """specwatch added (after vLLM, or as a native sidecar), vLLM the default container, the rest unchanged."""
    assert validation_errors(patched) == []
    template = patched["spec"]["template"]
    spec = template["spec"]
    names = [c["name"] for c in spec["containers"]]
    if native:
        assert names == [c["name"] for c in original["spec"]["template"]["spec"]["containers"]]
        sidecar = next(c for c in spec["initContainers"] if c["name"] == "specwatch")
        assert sidecar["restartPolicy"] == "Always"
        # First init container: it is started (not completed) before the others run, so it watches
        # from the start and never waits on a model download.
        assert spec["initContainers"][0]["name"] == "specwatch"
    else:
        assert names == ["vllm", "specwatch"], "vLLM must stay first: kubectl logs/exec default to it"
        sidecar = spec["containers"][1]
        assert "restartPolicy" not in sidecar
    assert template["metadata"]["annotations"][DEFAULT_CONTAINER] == "vllm"
    assert {v["name"] for v in spec["volumes"]} >= SPECWATCH_VOLUMES
    assert without_specwatch(patched) == original, "the patch changed something besides adding specwatch"
    return sidecar


# ---- the shipped Component patch is the chart's patch -------------------------------------------------


def test_component_patch_is_the_notes_patch_for_release_specwatch_with_default_values():
    expected = component_patch_text()
    assert COMPONENT_PATCH.read_text() == expected, (
        "helm/specwatch/kustomize/specwatch-patch.yaml drifted from the chart: "
        "run `python tests/deploy/test_chart_injection.py --write`"
    )


def test_notes_patch_is_a_complete_document_with_the_default_container_annotation():
    patch = yaml.safe_load(notes_patch_text({}))
    assert patch["apiVersion"] == "apps/v1" and patch["kind"] == "Deployment" and patch["metadata"]["name"]
    template = patch["spec"]["template"]
    assert template["metadata"] == {"annotations": {DEFAULT_CONTAINER: "vllm"}}, "nothing that changes per config"
    assert template["spec"]["containers"][0] == {"name": "vllm"}, "vLLM named first, with nothing else"
    named = yaml.safe_load(notes_patch_text({"sidecar": {"vllmContainerName": "engine", "vllmDeployment": "llm-a"}}))
    assert named["metadata"]["name"] == "llm-a"
    assert named["spec"]["template"]["metadata"]["annotations"][DEFAULT_CONTAINER] == "engine"
    assert named["spec"]["template"]["spec"]["containers"][0] == {"name": "engine"}


# ---- the real tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("native", [False, True], ids=["containers", "native"])
@pytest.mark.parametrize("shape", sorted(VLLM_DEPLOYMENTS))
def test_kubectl_strategic_patch_adds_specwatch_after_vllm_and_changes_nothing_else(shape, native, tmp_path):
    kubectl = need_kubectl()
    deployment = VLLM_DEPLOYMENTS[shape]
    original = load(deployment)
    patch = tmp_path / "specwatch-patch.yaml"
    values = {"sidecar": {"vllmDeployment": original["metadata"]["name"], "native": native}}
    patch.write_text(notes_patch_text(values))
    out = run(
        [kubectl, "patch", "--local", "--type", "strategic", "-f", str(deployment), "--patch-file", str(patch)]
        + ["-o", "yaml"]
    )
    assert_injected(yaml.safe_load(out), original, native=native)


@pytest.mark.parametrize("shape", sorted(VLLM_DEPLOYMENTS))
def test_kustomize_component_adds_specwatch_to_the_vllm_deployment_only(shape, tmp_path):
    kubectl = need_kubectl()
    original = load(VLLM_DEPLOYMENTS[shape])
    other = {  # must pass through untouched: not a "-deployment-vllm"
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "router", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": {"app": "router"}},
            "template": {
                "metadata": {"labels": {"app": "router"}},
                "spec": {"containers": [{"name": "router", "image": "router:1"}]},
            },
        },
    }
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "vllm.yaml").write_text(yaml.safe_dump_all([original, other]))
    shutil.copytree(COMPONENT, tmp_path / "specwatch-component")
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["vllm.yaml"], "components": ["../specwatch-component"]})
    )
    docs = list(yaml.safe_load_all(run([kubectl, "kustomize", str(overlay)])))
    by_name = {d["metadata"]["name"]: d for d in docs}
    assert by_name["router"] == other
    sidecar = assert_injected(by_name[original["metadata"]["name"]], original)
    config_volume = next(
        v
        for v in by_name[original["metadata"]["name"]]["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "specwatch-config"
    )
    assert config_volume["configMap"]["name"] == "specwatch", "the ConfigMap of release specwatch"
    assert sidecar["image"] == f"specwatch/specwatch:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"


@pytest.mark.parametrize("shape", sorted(VLLM_DEPLOYMENTS))
def test_kustomize_with_the_native_sidecar_patch_leaves_containers_alone(shape, tmp_path):
    kubectl = need_kubectl()
    original = load(VLLM_DEPLOYMENTS[shape])
    (tmp_path / "vllm.yaml").write_text(yaml.safe_dump(original))
    (tmp_path / "specwatch-patch.yaml").write_text(notes_patch_text({"sidecar": {"native": True}}))
    target = {"group": "apps", "kind": "Deployment", "name": ".*-deployment-vllm"}
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["vllm.yaml"], "patches": [{"path": "specwatch-patch.yaml", "target": target}]})
    )
    assert_injected(yaml.safe_load(run([kubectl, "kustomize", str(tmp_path)])), original, native=True)


def helm_rendered_vllm_release(shape: str) -> str:
    """What Helm hands a post-renderer: the release's manifests, with its `# Source:` comments."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "vllm-engine-service", "namespace": "llm"},
        "spec": {"selector": {"release": "test"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]},
    }
    return (
        "---\n# Source: vllm/templates/service.yaml\n"
        + yaml.safe_dump(service)
        + "---\n# Source: vllm/templates/deployment.yaml\n"
        + VLLM_DEPLOYMENTS[shape].read_text()
    )


@pytest.mark.parametrize("shape", sorted(VLLM_DEPLOYMENTS))
def test_post_renderer_script_as_helm3_runs_it(shape, tmp_path):
    need_kubectl()
    patch = tmp_path / "specwatch-patch.yaml"
    patch.write_text(notes_patch_text({}))
    rendered = helm_rendered_vllm_release(shape)
    out = run(["sh", str(POST_RENDERER), f"--patch={patch}"], input=rendered)
    docs = {d["kind"]: d for d in yaml.safe_load_all(out) if d}
    original = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    assert docs["Service"] == original["Service"]
    assert_injected(docs["Deployment"], original["Deployment"])
    # Without --patch it uses the Component's patch next to it.
    default = {d["kind"]: d for d in yaml.safe_load_all(run(["sh", str(POST_RENDERER)], input=rendered)) if d}
    assert_injected(default["Deployment"], original["Deployment"])


def test_post_renderer_refuses_a_missing_patch_and_unknown_arguments(tmp_path):
    bad = subprocess.run(
        ["sh", str(POST_RENDERER), f"--patch={tmp_path / 'nope.yaml'}"],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "cannot read the patch" in bad.stderr
    unknown = subprocess.run(
        ["sh", str(POST_RENDERER), "--frobnicate"], input="", capture_output=True, text=True, check=False
    )
    assert unknown.returncode == 2 and "unknown argument" in unknown.stderr


# ---- the post-renderer takes data, not code ------------------------------------------------------------

EVIL_IMAGE = "evil/evil:1"
# Values that try to leave the `name:` scalar and add YAML of their own: a second patch that replaces
# vLLM's image, a kustomize `images:` override, a resource. A newline is the only way out of a
# single-quoted scalar, so every one of them is refused.
INJECTIONS = {
    "patch-replacing-vllms-image": (
        'x"\n  - patch: |-\n      - op: replace\n        path: /spec/template/spec/containers/0/image\n'
        f'        value: {EVIL_IMAGE}\n    target:\n      kind: Deployment\n      name: ".*'
    ),
    "images-override": 'x"\nimages:\n  - name: vllm/vllm-openai\n    newName: evil/evil\n    newTag: "1',
    "single-quoted-escape": f"x'\nimages: [{{name: vllm/vllm-openai, newName: {EVIL_IMAGE}}}]\n#",
    "carriage-return": "x\r\nimages: [{name: vllm/vllm-openai, newName: evil/evil}]",
}
# One line each, so they stay inside the scalar: quotes, flow and block indicators, comments, anchors,
# tags, shell syntax. Each must reach kustomize exactly, as the one patch's target name.
PRINTABLE_HOSTILE = [
    "vllm-llama\\d-deployment-vllm",
    "[\\w-]+-deployment-vllm",
    "a\\\\b\\x41\\u0041\\",
    "it's ''quoted'' \"twice\"",
    "x', images: [{name: vllm/vllm-openai, newName: evil/evil}], name: 'y",
    'x", images: [{name: vllm/vllm-openai, newName: evil/evil}], name: "y',
    "x} # {images: [evil]} &a *a !!python/object:os.system %TAG @`",
    "$(touch pwned) `id` ${HOME} $HOME",
    "- path: evil.yaml",
    "? key : value",
]


def images_in(docs: list) -> set[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(docs)
    return found


def run_post_renderer(args: list[str], rendered: str, env: dict[str, str] | None = None):
    return subprocess.run(
        ["sh", str(POST_RENDERER), *args],
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def kustomize_stub(tmp_path: Path) -> dict[str, str]:
    """A `kustomize` first on PATH that prints the kustomization it is handed, instead of building it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "kustomize"
    stub.write_text('#!/bin/sh\ncat "$2/kustomization.yaml"\n')
    stub.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("target", PRINTABLE_HOSTILE)
def test_post_renderer_writes_any_printable_target_as_one_exact_yaml_string(target, tmp_path):
    out = run_post_renderer([f"--target={target}"], "", env=kustomize_stub(tmp_path))
    assert out.returncode == 0, out.stderr
    kustomization = yaml.safe_load(out.stdout)
    assert kustomization == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["rendered.yaml"],
        "patches": [
            {"path": "specwatch-patch.yaml", "target": {"group": "apps", "kind": "Deployment", "name": target}}
        ],
    }


@pytest.mark.parametrize(
    "target, patched",
    [
        ("vllm-llama\\d-deployment-vllm", True),  # \d: a digit, as Go's regexp reads it
        ("vllm-llama\\d+-deployment-\\w+", True),
        ("vllm-llama\\\\d-deployment-vllm", False),  # a literal backslash: matches nothing
        ("vllm-llama3-deployment-vllm|it's", True),  # a quote survives
    ],
)
def test_post_renderer_target_regex_with_backslashes_renders_with_kustomize(target, patched):
    need_kubectl()
    rendered = helm_rendered_vllm_release("production-stack")
    out = run_post_renderer([f"--target={target}"], rendered)
    assert out.returncode == 0, out.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(out.stdout) if d}
    original = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    if patched:
        assert_injected(docs["Deployment"], original["Deployment"])
    else:
        assert docs["Deployment"] == original["Deployment"]


@pytest.mark.parametrize("how", ["argument", "environment"])
@pytest.mark.parametrize("name", sorted(INJECTIONS))
def test_post_renderer_refuses_a_target_that_would_add_yaml_and_never_outputs_an_image_it_was_not_given(
    name, how, tmp_path
):
    need_kubectl()
    rendered = helm_rendered_vllm_release("production-stack")
    value = INJECTIONS[name]
    args, env = ([f"--target={value}"], None) if how == "argument" else ([], {"SPECWATCH_TARGET": value})
    out = run_post_renderer(args, rendered, env=env)
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr)
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and "--target" in out.stderr, out.stderr
    assert "evil" not in out.stdout


@pytest.mark.parametrize("target", PRINTABLE_HOSTILE[3:])
def test_post_renderer_output_holds_only_the_images_it_was_given(target):
    """Hostile one-line targets reach real kustomize as a name to match and nothing else."""
    need_kubectl()
    rendered = helm_rendered_vllm_release("production-stack")
    given = images_in(list(yaml.safe_load_all(rendered))) | images_in([load(COMPONENT_PATCH)])
    out = run_post_renderer([f"--target={target}"], rendered)
    assert out.returncode in (0, 2), out.stderr  # matched nothing, or not a Go regexp (refused)
    if out.returncode == 0:
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
        assert images_in(docs) <= given
        assert docs == [d for d in yaml.safe_load_all(rendered) if d], "no name here matches a Deployment"
    else:
        assert out.stdout == "" and len(out.stderr.splitlines()) == 1 and "regular expression" in out.stderr


@pytest.mark.parametrize(
    "target, message",
    [
        ("", "is empty"),
        ("vllm\u202e-deployment-vllm", "printable ASCII"),  # a bidi override
        ("\u0442est-deployment-vllm", "printable ASCII"),  # a Cyrillic look-alike
        ("a" * 1025, "more than 1024"),
        ("(unclosed", "not a regular expression"),
    ],
    ids=["empty", "bidi", "non-ascii", "too-long", "bad-regexp"],
)
def test_post_renderer_refuses_a_bad_target_with_one_line_and_exit_2(target, message):
    need_kubectl()
    out = run_post_renderer([f"--target={target}"], helm_rendered_vllm_release("production-stack"))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


HELM4_PLUGIN_SCRIPT = r"""
import json, sys
import helm_python as helm
from helm_python import _native

chart_dir, patch = sys.argv[1], sys.argv[2]
config = helm.Config(kubeconfig_path=sys.argv[3], namespace="llm", storage_driver="memory")
with helm.Chart.load(chart_dir) as chart:
    # helm install --dry-run=client --post-renderer specwatch --post-renderer-args --patch=...
    # (the SDK's install() has no post-renderer keyword; its C ABI takes the option)
    payload = _native.call_string(
        "helm_install", config._raw(), config._context_arg(None), chart._raw(), None, "demo", None,
        json.dumps({"namespace": "llm", "dry_run": "client", "post_renderer": "specwatch",
                    "post_renderer_args": ["--patch=" + patch]}),
    )
print(json.loads(payload)["manifest"])
"""


def helm4_install_through_the_plugin(tmp_path: Path, deployment: str, patch_text: str) -> str:
    """The manifest of `helm install --dry-run=client --post-renderer specwatch` of a vLLM chart holding
    `deployment`, with `patch_text` as --patch. Helm 4 takes plugin names for --post-renderer:
    plugin.yaml makes the directory one. Run in a subprocess because the engine reads HELM_PLUGINS
    from the environment it starts with."""
    need_kubectl()
    _helm()
    chart = tmp_path / "vllm"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: vllm\nversion: 0.1.0\n")
    (chart / "templates" / "deployment.yaml").write_text(deployment)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copytree(POST_RENDERER_DIR, plugins / "specwatch")  # what `helm plugin install` leaves
    patch = tmp_path / "specwatch-patch.yaml"
    patch.write_text(patch_text)
    kubeconfig = tmp_path / "kubeconfig"  # never contacted: a client dry run
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none"}}],
                "current-context": "none",
                "users": [],
            }
        )
    )
    env = {**os.environ, "HELM_PLUGINS": str(plugins), "HOME": str(tmp_path)}
    return run([sys.executable, "-c", HELM4_PLUGIN_SCRIPT, str(chart), str(patch), str(kubeconfig)], env=env)


@pytest.mark.parametrize("shape", sorted(VLLM_DEPLOYMENTS))
def test_post_renderer_as_a_helm4_plugin_through_the_helm_engine(shape, tmp_path):
    out = helm4_install_through_the_plugin(tmp_path, VLLM_DEPLOYMENTS[shape].read_text(), notes_patch_text({}))
    (patched,) = [d for d in yaml.safe_load_all(out) if d]
    original = load(VLLM_DEPLOYMENTS[shape])
    assert_injected(patched, original)


def test_a_wrong_vllm_container_name_adds_an_image_less_container_that_the_api_server_refuses(tmp_path):
    """The bare `{name: <vllmContainerName>}` entry, when no container has that name, adds a container
    with no image: the API server refuses the Deployment (`containers[..].image: Required value`), so a
    wrong sidecar.vllmContainerName fails the apply instead of silently moving the default container.
    (The OpenAPI schema kubernetes-validate checks does not require an image, so this asserts the shape.)"""
    kubectl = need_kubectl()
    deployment = VLLM_DEPLOYMENTS["production-stack"]
    patch = tmp_path / "p.yaml"
    patch.write_text(
        notes_patch_text(
            {"sidecar": {"vllmContainerName": "engine", "vllmDeployment": load(deployment)["metadata"]["name"]}}
        )
    )
    out = run(
        [
            kubectl,
            "patch",
            "--local",
            "--type",
            "strategic",
            "-f",
            str(deployment),
            "--patch-file",
            str(patch),
            "-o",
            "yaml",
        ]
    )
    containers = yaml.safe_load(out)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["engine", "specwatch", "vllm"]
    assert containers[0] == {"name": "engine"}


# ---- QoS: Guaranteed resources in sidecar mode ----------------------------------------------------------


@pytest.mark.parametrize(
    "resources, message",
    [
        ({"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": None}, "resources.limits.cpu is not set"),
        ({"requests": None, "limits": None}, "resources.limits.cpu is not set"),
        ({"limits": {"memory": None}}, "resources.limits.memory is not set"),
        ({"requests": {"cpu": "100m"}}, "resources.requests.cpu=100m differs from resources.limits.cpu=200m"),
        ({"requests": {"memory": "64Mi"}}, "resources.requests.memory=64Mi differs from resources.limits.memory=128Mi"),
    ],
)
def test_sidecar_mode_refuses_resources_that_make_a_guaranteed_vllm_pod_burstable(resources, message):
    helm = _helm()
    with pytest.raises(helm.HelmRenderError) as err:
        render_files({"resources": resources})
    assert message in str(err.value) and "sidecar.allowNonGuaranteedResources" in str(err.value)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"resources": {"requests": {"cpu": "0.2", "memory": "134217728"}}}, id="equal-quantities"),
        pytest.param({"resources": {"requests": None, "limits": {"cpu": 1, "memory": "1Gi"}}}, id="limits-only"),
        pytest.param(
            {"resources": {"limits": None}, "sidecar": {"allowNonGuaranteedResources": True}}, id="explicitly-allowed"
        ),
        pytest.param(
            {
                "mode": "standalone",
                "resources": {"limits": None},
                "config": {"targets": [{"name": "a", "url": "http://a:8000/metrics"}]},
            },
            id="standalone-not-checked",
        ),
    ],
)
def test_guaranteed_check_accepts_equal_quantities_limits_only_and_the_explicit_opt_out(values):
    assert render_files(values)


# ---- fleet Deployment strategy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"mode": "standalone", "config": {"targets": [{"name": "a", "url": "http://a:8000/metrics"}]}},
        {"mode": "prometheus", "config": {"prometheus": {"url": "http://prometheus.monitoring.svc:9090"}}},
    ],
    ids=["standalone", "prometheus"],
)
def test_own_deployment_recreates_so_two_pods_never_export_the_same_series(values):
    files = render_files(values)
    deploy = yaml.safe_load(files["specwatch/templates/deployment.yaml"])
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert validation_errors(deploy) == []


def test_native_sidecar_container_carries_restart_policy_only_where_it_is_valid():
    patch = yaml.safe_load(notes_patch_text({"sidecar": {"native": True}}))
    spec = patch["spec"]["template"]["spec"]
    assert "containers" not in spec and spec["initContainers"][0]["restartPolicy"] == "Always"
    notes = render_files({"sidecar": {"native": True}})["specwatch/templates/NOTES.txt"]
    extra = yaml.safe_load(notes.split("# --- specwatch extraContainers begin ---")[1].split("# --- specwatch")[0])
    assert "restartPolicy" not in extra["extraContainers"][0], "extraContainers land in containers"
    standalone = render_files(
        {
            "mode": "standalone",
            "sidecar": {"native": True},
            "config": {"targets": [{"name": "a", "url": "http://a:8000/metrics"}]},
        }
    )
    assert (
        "restartPolicy"
        not in yaml.safe_load(standalone["specwatch/templates/deployment.yaml"])["spec"]["template"]["spec"][
            "containers"
        ][0]
    )


# ---- the packaged chart --------------------------------------------------------------------------------

MONITORING = {
    "podMonitor": {"enabled": True, "selectorOverride": {"app": "vllm"}},
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True},
}


def test_helm_package_renders_from_the_tgz_alone_with_rules_and_dashboards(tmp_path):
    helm = _helm()
    archive = Path(helm.package(str(CHART), destination=str(tmp_path / "dist")))
    assert archive.name == f"specwatch-{yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}.tgz"
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    assert not [m.name for m in members if m.issym() or m.islnk()], "symlinks must be resolved into the package"
    names = {m.name for m in members}
    assert {"specwatch/kustomize/kustomization.yaml", "specwatch/post-renderer/plugin.yaml"} <= names
    # The archive alone, away from the repository (no rules/ or dashboards/ to follow a link to).
    alone = tmp_path / "elsewhere" / archive.name
    alone.parent.mkdir()
    shutil.copy(archive, alone)
    packaged = render_files(MONITORING, chart_path=alone)
    from_source = render_files(MONITORING)
    assert packaged == from_source
    rules = yaml.safe_load(packaged["specwatch/templates/prometheusrule.yaml"])
    assert rules["spec"]["groups"], "the rules came along"
    dashboards = [d for d in yaml.safe_load_all(packaged["specwatch/templates/dashboards.yaml"]) if d]
    assert dashboards and all(d["data"] for d in dashboards)
    # The same archive bytes, loaded from memory.
    with helm.Chart.load_archive(alone.read_bytes()) as chart:
        assert chart.render(MONITORING, name="specwatch", namespace="llm") == from_source


def test_license_file_is_apache_2_as_the_package_and_chart_declare():
    import tomllib

    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == {"text": "Apache-2.0"}
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]["artifacthub.io/license"] == "Apache-2.0"


def _write() -> None:
    COMPONENT_PATCH.write_text(component_patch_text())
    print(f"wrote {COMPONENT_PATCH.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        print(__doc__)
        sys.exit(2)
