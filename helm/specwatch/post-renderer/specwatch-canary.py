#!/usr/bin/env python3
"""A one-replica spec-off canary of each vLLM Deployment on stdin (JSON objects, one after another,
as `kubectl patch --local -o json` prints them); prints the canaries as JSON, one per line.

Standard library only: the post-renderer (specwatch-post-renderer --canary) runs it on the
Deployments its --target selects, after the sidecar patch, and feeds the result back to kustomize.

Each canary is a copy of its Deployment with:
- the name + SUFFIX (default "-spec-off-canary"), replicas 1, no status, no revision annotation;
- `--speculative-config X`, `--speculative-config=X` (or `--speculative_config`, as vLLM also
  accepts) removed from every container's command and args, whatever X is (JSON included);
- without the annotation specwatch.dev/canary-requested (the patch's request for this copy: the
  canary itself asks for none);
- the label specwatch.dev/canary: spec-off on the Deployment, its selector and its pod template,
  and the annotation specwatch.dev/canary-of: <the Deployment's name>, so the canary's pods are
  its own (the original's selector is a subset: it does not own them, its ReplicaSets' pod-template
  hash tells them apart) and fleet mode can pick them (prometheus.canary, docs/kubernetes.md);
- the specwatch sidecar removed: a sidecar of a spec-off vLLM would raise
  SpecDecodeMetricsMissing (its route expects speculation); fleet mode reads the canary's vLLM
  metrics from Prometheus itself.

A Deployment whose containers carry no such flag in list form (e.g. `sh -c "vllm serve ..."`) is
refused: a "canary" that still speculates would measure nothing. Errors: one line, exit 1.
"""

from __future__ import annotations

import copy
import json
import sys

LABEL, VALUE = "specwatch.dev/canary", "spec-off"
SOURCE = "specwatch.dev/canary-of"
REQUEST = "specwatch.dev/canary-requested"
FLAGS = ("--speculative-config", "--speculative_config")
SIDECAR = "specwatch"
SIDECAR_VOLUMES = ("specwatch-config", "specwatch-tmp")


class CanaryError(Exception):
    pass


def without_flag(words: list[str]) -> tuple[list[str], int]:
    """`words` without the flag and its value (both forms); how many were removed."""
    out: list[str] = []
    removed = 0
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in FLAGS:
            if i + 1 >= len(words):
                raise CanaryError(f"{word} is the last argument: no value to remove with it")
            skip, removed = True, removed + 1
        elif word.split("=", 1)[0] in FLAGS and "=" in word:
            removed += 1
        else:
            out.append(str(word))
    return out, removed


def spec_off(pod: dict) -> int:
    """The pod spec without the sidecar and the flag; how many flags were removed."""
    removed = 0
    for field in ("containers", "initContainers"):
        kept = []
        for container in pod.get(field) or []:
            if container.get("name") == SIDECAR:
                continue
            for key in ("command", "args"):
                if isinstance(container.get(key), list):
                    container[key], n = without_flag(container[key])
                    removed += n
            kept.append(container)
        if field in pod:
            pod[field] = kept
    if "volumes" in pod:
        pod["volumes"] = [v for v in pod["volumes"] if v.get("name") not in SIDECAR_VOLUMES]
    return removed


def canary(deployment: dict, suffix: str) -> dict:
    name = deployment.get("metadata", {}).get("name", "")
    if deployment.get("kind") != "Deployment" or not name:
        raise CanaryError(f"not a named Deployment: {deployment.get('kind')} {name!r}")
    out = copy.deepcopy(deployment)
    out.pop("status", None)
    meta = out["metadata"]
    meta["name"] = name + suffix
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    meta.setdefault("labels", {})[LABEL] = VALUE
    annotations = meta.setdefault("annotations", {})
    annotations.pop("deployment.kubernetes.io/revision", None)
    annotations.pop(REQUEST, None)
    annotations[SOURCE] = name
    spec = out.setdefault("spec", {})
    spec["replicas"] = 1
    spec.setdefault("selector", {}).setdefault("matchLabels", {})[LABEL] = VALUE
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("labels", {})[LABEL] = VALUE
    template["metadata"].setdefault("annotations", {})[SOURCE] = name
    pod = template.setdefault("spec", {})
    removed = spec_off(pod)
    if not removed:
        raise CanaryError(
            f"Deployment {name}: no --speculative-config in a container's command or args list "
            "(a flag inside a shell string cannot be removed safely): no spec-off canary to render"
        )
    return out


def objects(text: str) -> list[dict]:
    decoder, found, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return found
        obj, i = decoder.raw_decode(text, i)
        found.extend(obj.get("items", []) if obj.get("kind") == "List" else [obj])


def main(argv: list[str]) -> int:
    suffix = argv[1] if len(argv) > 1 else "-spec-off-canary"
    try:
        for deployment in objects(sys.stdin.read()):
            print("---\n" + json.dumps(canary(deployment, suffix), sort_keys=True))
    except (CanaryError, ValueError) as exc:
        print(f"specwatch-post-renderer: canary: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
