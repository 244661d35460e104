"""NOTES name the image the chart actually renders, and, for values.yaml's placeholder (repository
specwatch/specwatch with no registry: Docker Hub, where no specwatch image is published), say that it
does not exist and print the build and push commands (docs/kubernetes.md, "From the Dockerfile to
helm install")."""

from __future__ import annotations

import re

import pytest
import yaml

from deploy.test_chart_injection import notes_patch_text, render_files

STANDALONE = {"mode": "standalone", "config": {"targets": [{"name": "a", "url": "http://a:8000/metrics"}]}}
FLEET = {"mode": "prometheus", "config": {"prometheus": {"url": "http://prometheus.monitoring.svc:9090"}}}
MISSING = "That image does not exist"


def notes_image(notes: str) -> str:
    (image,) = re.findall(r"^Image: (\S+)$", notes, re.MULTILINE)
    return image


def rendered_image(values: dict) -> str:
    if values.get("mode", "sidecar") == "sidecar":
        containers = yaml.safe_load(notes_patch_text(values))["spec"]["template"]["spec"]["containers"]
    else:
        deployment = yaml.safe_load(render_files(values)["specwatch/templates/deployment.yaml"])
        containers = deployment["spec"]["template"]["spec"]["containers"]
    (specwatch,) = [c for c in containers if c["name"] == "specwatch"]
    return specwatch["image"]


@pytest.mark.parametrize("mode", [{}, STANDALONE, FLEET], ids=["sidecar", "standalone", "prometheus"])
@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({}, "specwatch/specwatch:0.1.0"),
        ({"global": {"imageRegistry": "registry.example.com"}}, "registry.example.com/specwatch/specwatch:0.1.0"),
        (
            {"global": {"imageRegistry": "localhost:5000"}, "image": {"repository": "ml/specwatch", "tag": "dev"}},
            "localhost:5000/ml/specwatch:dev",
        ),
        (
            {
                "global": {"imageRegistry": "a.example"},
                "image": {"registry": "b.example", "digest": "sha256:" + "0" * 64},
            },
            "b.example/specwatch/specwatch:0.1.0@sha256:" + "0" * 64,
        ),
    ],
    ids=["placeholder", "global-registry", "registry-and-repository", "image-registry-wins-with-digest"],
)
def test_notes_name_the_image_the_pods_run(mode, image, expected):
    values = {**mode, **image}
    notes = render_files(values)["specwatch/templates/NOTES.txt"]
    assert notes_image(notes) == rendered_image(values) == expected


def test_the_placeholder_image_is_called_missing_with_the_build_push_and_upgrade_commands():
    notes = render_files({})["specwatch/templates/NOTES.txt"]
    assert MISSING in notes
    for command in (
        "buildah bud -t <registry>/specwatch:0.1.0 .",
        "buildah push <registry>/specwatch:0.1.0",
        "--set global.imageRegistry=<registry> --set image.repository=specwatch",
    ):
        assert command in notes


@pytest.mark.parametrize(
    "values",
    [
        {"global": {"imageRegistry": "registry.example.com"}},
        {"image": {"registry": "registry.example.com"}},
        {"image": {"repository": "example/specwatch"}},
    ],
    ids=["global-registry", "image-registry", "own-repository"],
)
def test_an_image_the_user_configured_is_not_called_missing(values):
    notes = render_files(values)["specwatch/templates/NOTES.txt"]
    assert MISSING not in notes and "buildah" not in notes
