"""The spec-off canary the post-renderer renders with --canary (helm/specwatch/post-renderer/
specwatch-canary.py), with the real kubectl/kustomize, on the vLLM charts' Deployment shapes
(tests/deploy/fixtures): one replica, no --speculative-config in either form, a distinct name, the
specwatch.dev/canary label on the Deployment, its selector and its pods, no sidecar, the original
untouched beside it, and a valid apps/v1 Deployment."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy.test_chart_injection import KUBE_VERSION, POST_RENDERER, VLLM_DEPLOYMENTS, load, need_kubectl

JSON_CONFIG = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def render(manifest: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    need_kubectl()
    return subprocess.run(
        [str(POST_RENDERER), *args],
        check=False,
        input=manifest,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def deployments(text: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"}


def with_flag(fixture: str, where: str, form: str) -> dict:
    """The fixture's Deployment with a --speculative-config in `where` (command or args) in `form`."""
    deployment = copy.deepcopy(load(VLLM_DEPLOYMENTS[fixture]))
    vllm = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    for key in ("command", "args"):
        vllm[key] = [w for w in vllm.get(key) or [] if not str(w).startswith("{") and w != "--speculative-config"]
    flag = ["--speculative-config", JSON_CONFIG] if form == "separate" else [f"--speculative-config={JSON_CONFIG}"]
    vllm[where] = [*vllm[where], *flag, "--max-num-seqs", "64"]
    if not vllm["args"]:
        del vllm["args"]
    return deployment


def spec_words(deployment: dict) -> list[str]:
    return [
        str(w)
        for c in deployment["spec"]["template"]["spec"]["containers"]
        for w in (c.get("command") or []) + (c.get("args") or [])
    ]


@pytest.mark.parametrize(
    ("fixture", "where", "form"),
    [
        ("production-stack", "args", "separate"),
        ("production-stack", "args", "equals"),
        ("vllm-example-chart", "command", "separate"),
        ("vllm-example-chart", "command", "equals"),
    ],
)
def test_canary_is_one_spec_off_replica_labelled_for_fleet_mode_beside_the_untouched_original(fixture, where, form):
    original = with_flag(fixture, where, form)
    name = original["metadata"]["name"]
    plain = render(yaml.safe_dump(original))
    done = render(yaml.safe_dump(original), "--canary")
    assert done.returncode == 0, done.stderr
    out = deployments(done.stdout)
    assert set(out) == {name, f"{name}-spec-off-canary"}
    assert out[name] == deployments(plain.stdout)[name], "the original renders exactly as without --canary"
    assert any("--speculative-config" in w for w in spec_words(out[name]))

    canary = out[f"{name}-spec-off-canary"]
    assert canary["spec"]["replicas"] == 1
    words = spec_words(canary)
    assert not any("speculative" in w or "EAGLE3" in w for w in words), words
    assert words[-2:] == ["--max-num-seqs", "64"], "the other flags stay, in order"
    label = {"specwatch.dev/canary": "spec-off"}
    assert label.items() <= canary["metadata"]["labels"].items()
    assert label.items() <= canary["spec"]["selector"]["matchLabels"].items()
    assert label.items() <= canary["spec"]["template"]["metadata"]["labels"].items()
    assert canary["spec"]["template"]["metadata"]["annotations"]["specwatch.dev/canary-of"] == name
    # the original's selector still matches the canary's pods (same Service, same traffic share)
    assert (
        original["spec"]["selector"]["matchLabels"].items() <= canary["spec"]["template"]["metadata"]["labels"].items()
    )
    pod = canary["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["vllm"], "no sidecar: it would raise SpecDecodeMetricsMissing"
    assert not {"specwatch-config", "specwatch-tmp"} & {v["name"] for v in pod.get("volumes", [])}
    assert "specwatch.dev/canary-source" not in done.stdout, "the selection's marker never leaves the renderer"
    for doc in (canary, out[name]):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)  # raises on an invalid object


def test_canary_of_a_deployment_without_the_flag_in_a_list_is_refused_in_one_line():
    shell_form = load(VLLM_DEPLOYMENTS["vllm-example-chart"])  # no --speculative-config at all
    done = render(yaml.safe_dump(shell_form), "--canary")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no --speculative-config" in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--canary=yes"], {}, "unknown argument --canary=yes"),
        ([], {"SPECWATCH_CANARY": "maybe"}, "SPECWATCH_CANARY must be 1, true, 0 or false"),
        (["--canary", "--target=^nothing$"], {}, "no Deployment matches --target"),
    ],
)
def test_a_bad_canary_flag_is_one_line_and_exit_2(args, env, message):
    done = render(Path(VLLM_DEPLOYMENTS["production-stack"]).read_text(), *args, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_canary_env_variable_renders_the_canary_as_the_flag_does():
    text = Path(VLLM_DEPLOYMENTS["production-stack"]).read_text()
    by_env, by_flag = render(text, env={"SPECWATCH_CANARY": "true"}), render(text, "--canary")
    assert by_env.returncode == by_flag.returncode == 0
    assert by_env.stdout == by_flag.stdout and "-spec-off-canary" in by_env.stdout
