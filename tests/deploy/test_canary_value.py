"""canary.enabled: the chart's patch asks the post-renderer for the one-replica spec-off canary of the
vLLM Deployment, which it renders with the vLLM release. With the real tools: the chart's NOTES from
the Helm engine (helm-python-sdk), the vLLM release installed through the post-renderer as a Helm 4
plugin by that engine, the script as Helm 3 runs it, and `kubectl kustomize` with the Component piped
through it (docs/kubernetes.md). Turning the value off renders the release without the canary."""

from __future__ import annotations

import copy
import os
import re
import subprocess

import kubernetes_validate
import pytest
import yaml

from deploy.test_canary_manifest import spec_words, with_flag
from deploy.test_chart_injection import (
    COMPONENT,
    KUBE_VERSION,
    POST_RENDERER,
    _helm,
    assert_injected,
    helm4_install_through_the_plugin,
    need_kubectl,
    notes_patch_text,
    render_files,
    run_post_renderer,
)

CANARY = {"canary": {"enabled": True}}
FLEET = {"mode": "prometheus", "config": {"prometheus": {"url": "http://prometheus.monitoring.svc:9090"}}}
REQUEST = "specwatch.dev/canary-requested"
SUFFIX = "-spec-off-canary"


def vllm_with_flag() -> dict:
    return with_flag("production-stack", "args", "separate")


def notes_block(values: dict, word: str) -> str:
    """The block between NOTES' `# --- specwatch <word> patch begin/end ---` lines, as its `sed` prints it."""
    notes = render_files(values)["specwatch/templates/NOTES.txt"]
    sed = re.search(r"sed -n '(/\^# --- specwatch \w+ patch begin/,/\^# --- specwatch \w+ patch end/p)'", notes)
    assert sed and f"specwatch {word} patch" in sed.group(1), notes
    return subprocess.run(["sed", "-n", sed.group(1)], input=notes, capture_output=True, text=True, check=True).stdout


def by_name(text: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"}


def assert_canary_of(canary: dict, original: dict) -> None:
    name = original["metadata"]["name"]
    assert canary["metadata"]["name"] == name + SUFFIX and canary["spec"]["replicas"] == 1
    assert not any("speculative" in w for w in spec_words(canary)), spec_words(canary)
    label = {"specwatch.dev/canary": "spec-off"}
    for labels in (
        canary["metadata"]["labels"],
        canary["spec"]["selector"]["matchLabels"],
        canary["spec"]["template"]["metadata"]["labels"],
    ):
        assert label.items() <= labels.items()
    assert (
        original["spec"]["selector"]["matchLabels"].items() <= canary["spec"]["template"]["metadata"]["labels"].items()
    )
    assert [c["name"] for c in canary["spec"]["template"]["spec"]["containers"]] == ["vllm"], "no sidecar"
    assert REQUEST not in canary["metadata"].get("annotations", {}), "the canary asks for no canary of itself"
    kubernetes_validate.validate(canary, KUBE_VERSION, strict=True)


def test_canary_enabled_adds_only_the_request_annotation_to_the_deployments_metadata_never_to_its_pods():
    off, on = yaml.safe_load(notes_patch_text({})), yaml.safe_load(notes_patch_text(CANARY))
    assert on["metadata"]["annotations"] == {REQUEST: "spec-off"}
    del on["metadata"]["annotations"]
    assert on == off, "the pod template is the same: asking for a canary rolls no vLLM pod"


def test_helm_install_through_the_plugin_renders_the_canary_with_the_value_and_not_without_it(tmp_path):
    original = vllm_with_flag()
    name = original["metadata"]["name"]
    on = by_name(helm4_install_through_the_plugin(tmp_path / "on", yaml.safe_dump(original), notes_patch_text(CANARY)))
    assert set(on) == {name, name + SUFFIX}
    assert on[name]["metadata"]["annotations"][REQUEST] == "spec-off"
    patched = copy.deepcopy(on[name])
    del patched["metadata"]["annotations"][REQUEST]
    if not patched["metadata"]["annotations"]:
        del patched["metadata"]["annotations"]
    assert_injected(patched, original)
    assert_canary_of(on[name + SUFFIX], original)

    off = by_name(helm4_install_through_the_plugin(tmp_path / "off", yaml.safe_dump(original), notes_patch_text({})))
    assert set(off) == {name}, "canary.enabled=false: the next upgrade's manifest drops the canary"


def test_the_post_renderer_script_renders_the_canary_from_the_patch_as_helm_3_runs_it(tmp_path):
    need_kubectl()
    original = vllm_with_flag()
    patch = tmp_path / "specwatch-patch.yaml"
    patch.write_text(notes_block(CANARY, "sidecar"))
    done = run_post_renderer(
        [f"--patch={patch}"], "---\n# Source: vllm/templates/deployment.yaml\n" + yaml.safe_dump(original)
    )
    assert done.returncode == 0, done.stderr
    out = by_name(done.stdout)
    assert_canary_of(out[original["metadata"]["name"] + SUFFIX], original)


def test_kubectl_kustomize_with_the_component_piped_through_the_post_renderer_adds_the_canary(tmp_path):
    """The documented kustomize path: the Component adds the sidecar, the pipe the canary."""
    kubectl = need_kubectl()
    original = vllm_with_flag()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "vllm.yaml").write_text(yaml.safe_dump(original))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["vllm.yaml"], "components": [os.path.relpath(COMPONENT, overlay)]})
    )
    patch = tmp_path / "specwatch-patch.yaml"
    patch.write_text(notes_block(CANARY, "sidecar"))
    done = subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f'"{kubectl}" kustomize overlay | "{POST_RENDERER}" --patch=specwatch-patch.yaml',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = by_name(done.stdout)
    name = original["metadata"]["name"]
    assert set(out) == {name, name + SUFFIX}
    assert [c["name"] for c in out[name]["spec"]["template"]["spec"]["containers"]] == ["vllm", "specwatch"]
    assert_canary_of(out[name + SUFFIX], original)


def test_fleet_mode_prints_a_patch_that_asks_for_the_canary_and_adds_no_sidecar(tmp_path):
    need_kubectl()
    values = {**FLEET, **CANARY}
    block = notes_block(values, "canary")
    assert yaml.safe_load(block)["metadata"]["annotations"] == {REQUEST: "spec-off"}
    assert "spec:" not in block, "the request alone: fleet mode touches no vLLM pod"
    original = vllm_with_flag()
    patch = tmp_path / "specwatch-patch.yaml"
    patch.write_text(block)
    done = run_post_renderer([f"--patch={patch}"], yaml.safe_dump(original))
    assert done.returncode == 0, done.stderr
    out = by_name(done.stdout)
    name = original["metadata"]["name"]
    assert out[name]["spec"] == original["spec"], "the vLLM pods are unchanged"
    assert_canary_of(out[name + SUFFIX], original)
    assert "specwatch canary patch" not in render_files(FLEET)["specwatch/templates/NOTES.txt"]


def test_notes_print_the_commands_that_apply_and_remove_the_canary():
    notes = render_files(CANARY)["specwatch/templates/NOTES.txt"]
    for line in (
        "--post-renderer ./helm/specwatch/post-renderer/specwatch-post-renderer",
        "--post-renderer-args --patch=$PWD/specwatch-patch.yaml",
        "kubectl -n llm delete deployment -l specwatch.dev/canary=spec-off",
    ):
        assert line in notes
    assert "Spec-off canary" not in render_files({})["specwatch/templates/NOTES.txt"]


def test_canary_enabled_in_standalone_mode_fails_the_render_naming_the_modes_it_needs():
    helm = _helm()
    standalone = {"mode": "standalone", "config": {"targets": [{"name": "a", "url": "http://a:8000/metrics"}]}}
    with pytest.raises(helm.HelmRenderError, match=r"canary\.enabled needs mode=sidecar or mode=prometheus"):
        render_files({**standalone, **CANARY})
