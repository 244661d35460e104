"""docs/kubernetes.md, "From the Dockerfile to helm install", run as written: the block marked
<!-- walkthrough --> builds the Dockerfile with buildah, pushes it to a registry and installs the chart
with image.repository and global.imageRegistry. Then the image the chart renders is pulled, by its
digest, into an empty store (what a kubelet does), and its entrypoint and user are checked.

What this machine lacks is stood in for, nothing else is changed in the block:
- the Dockerfile's base image (no registry of base images is reachable): the stand-in that
  test_image.py makes, from the same cached debootstrap tarball ($SPECWATCH_IMAGE_CACHE), tagged with
  the FROM name, in this test's own buildah store (CONTAINERS_STORAGE_CONF, chroot isolation);
- REGISTRY: a local registry (the `registry` fixture of conftest.py: Debian's docker-registry on
  loopback, plain HTTP), marked insecure in CONTAINERS_REGISTRIES_CONF as the doc says to;
- `helm`: a shell function that records its arguments; the Helm engine (helm-python-sdk) renders the
  chart with the same --set flags.
Needs root, buildah, debootstrap and docker-registry; skipped otherwise.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from system.image.needs import needs
from system.image.test_image import DOCKERFILE, ROOT, base_rootfs_tarball, from_image

DOC = ROOT / "docs" / "kubernetes.md"
CHART = ROOT / "helm" / "specwatch"
TAG = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]  # the walkthrough leaves image.tag empty

pytestmark = needs("buildah", "debootstrap", "docker-registry")


def walkthrough() -> str:
    match = re.search(r"<!-- walkthrough -->\n```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, "docs/kubernetes.md has no <!-- walkthrough --> sh block"
    return match.group(1)


def containers_env(tmp: Path, name: str, registry: str) -> dict[str, str]:
    """Environment for buildah with its own vfs store and the local registry marked insecure."""
    store = tmp / name
    store.mkdir()
    (store / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/root"\nrunroot = "{store}/run"\n'
    )
    (store / "registries.conf").write_text(
        f'unqualified-search-registries = ["docker.io"]\n[[registry]]\nlocation = "{registry}"\ninsecure = true\n'
    )
    return {
        **os.environ,
        "CONTAINERS_STORAGE_CONF": str(store / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(store / "registries.conf"),
        "BUILDAH_ISOLATION": "chroot",
        "STORAGE_DRIVER": "vfs",
    }


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 600) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def merge(into: dict, more: dict) -> None:
    """`more` merged into `into`, as Helm merges successive --set flags."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


def checkout(tmp: Path) -> Path:
    """What the walkthrough reads from the repository root: the build context and the chart."""
    work = tmp / "specwatch"
    work.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "requirements.lock", "README.md"):
        shutil.copy(ROOT / name, work / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "exporter", work / "exporter", ignore=ignore)
    shutil.copytree(CHART, work / "helm" / "specwatch", ignore=shutil.ignore_patterns("rules", "dashboards"))
    for source in ("rules", "dashboards"):
        shutil.copytree(ROOT / source, work / source)
    return work


def stand_in_base(env: dict[str, str]) -> None:
    """The Dockerfile's FROM, as test_image.py makes it, in this store."""
    container = run(["buildah", "from", "scratch"], env).strip()
    run(["buildah", "add", container, str(base_rootfs_tarball()), "/"], env)
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if host_ca.exists():
        run(["buildah", "copy", container, str(host_ca), str(host_ca)], env)
    run(["buildah", "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
         "--env", "LANG=C.UTF-8", container], env)  # fmt: skip
    run(["buildah", "commit", "--quiet", container, f"docker.io/library/{from_image()}"], env)
    run(["buildah", "rm", container], env)


def test_the_walkthrough_builds_pushes_and_installs_an_image_that_a_kubelet_can_pull(tmp_path, registry):
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk==0.2.2 is a test dependency")
    assert DOCKERFILE.is_file()
    env = containers_env(tmp_path, "build-store", registry)
    stand_in_base(env)
    work = checkout(tmp_path)
    block = walkthrough()
    assert re.search(r"^REGISTRY=\S+", block, re.MULTILINE) and f"TAG={TAG}" in block
    script = re.sub(r"^REGISTRY=\S+", f"REGISTRY={registry}", block, count=1, flags=re.MULTILINE)
    recorder = 'helm() { printf "%s\\n" "$@" > "$HELM_ARGS"; }\n'
    env = {**env, "HELM_ARGS": str(tmp_path / "helm-args")}
    run(["bash", "-euo", "pipefail", "-c", recorder + script], env, cwd=work, timeout=1800)

    args = (tmp_path / "helm-args").read_text().splitlines()
    assert args[:3] == ["install", "specwatch", "./helm/specwatch"], args
    values: dict = {}
    for flag, value in itertools.pairwise(args):
        if flag == "--set":
            merge(values, helm.parse_set_string(value))
    digest = (work / "specwatch.digest").read_text().strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
    expected = f"{registry}/specwatch:{TAG}@{digest}"
    with helm.Chart.load(str(work / "helm" / "specwatch")) as chart:
        notes = chart.render(values, name="specwatch", namespace="llm")["specwatch/templates/NOTES.txt"]
    assert f"\nImage: {expected}\n" in notes and "does not exist" not in notes
    assert f'image: "{expected}"' in notes, "the sidecar patch runs that image"

    # A kubelet's pull: the rendered reference, into an empty store, then its config.
    pull_env = containers_env(tmp_path, "node-store", registry)
    run(["buildah", "pull", "--quiet", expected], pull_env)
    config = json.loads(run(["buildah", "inspect", "--type", "image", expected], pull_env))["OCIv1"]["config"]
    assert config["Entrypoint"] == ["specwatch"] and config["User"] == "65534:65534"
