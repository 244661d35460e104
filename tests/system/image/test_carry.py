"""docs/kubernetes.md's route for a build machine that cannot reach the registry, run as written: the
block marked <!-- carry --> pushes the image to an OCI layout directory with buildah and copies that
to the registry with skopeo, which writes the digest step 3 installs by. The image pulled back by that
digest into an empty store is the one that was built.

What this machine lacks is stood in for, nothing else is changed in the block:
- the image: a small one made here (the route copies whatever image it is given; the Dockerfile's
  build is test_walkthrough.py's);
- REGISTRY: the local registry of conftest.py, marked insecure in a registries.conf of this test's
  own; buildah reads it from CONTAINERS_REGISTRIES_CONF, skopeo (1.9) only from its
  --registries-conf flag, which a shell function adds in place of /etc/containers/registries.conf.
Needs root, buildah, skopeo and docker-registry; skipped otherwise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from system.image.needs import needs
from system.image.test_walkthrough import DOC, TAG, containers_env, run

pytestmark = needs("buildah", "skopeo", "docker-registry")


def carry_block() -> str:
    match = re.search(r"<!-- carry -->\n```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, "docs/kubernetes.md has no <!-- carry --> sh block"
    return match.group(1)


def test_an_image_carried_as_an_oci_directory_reaches_the_registry_with_skopeo(tmp_path: Path, registry: str):
    env = containers_env(tmp_path, "build-store", registry)
    reference = f"{registry}/specwatch:{TAG}"
    marker = tmp_path / "marker"
    marker.write_text("carried\n")
    container = run(["buildah", "from", "scratch"], env).strip()
    run(["buildah", "copy", container, str(marker), "/marker"], env)
    run(["buildah", "config", "--label", "dev.specwatch.test=carry", container], env)
    run(["buildah", "commit", "--quiet", container, reference], env)

    variables = f"REGISTRY={registry}\nTAG={TAG}\n"  # what the walkthrough's block sets before
    system_conf = 'skopeo() { command skopeo --registries-conf "$CONTAINERS_REGISTRIES_CONF" "$@"; }\n'
    run(["bash", "-euo", "pipefail", "-c", variables + system_conf + carry_block()], env, cwd=tmp_path)
    assert (tmp_path / "specwatch-oci" / "index.json").is_file(), "buildah pushed no OCI layout directory"
    digest = (tmp_path / "specwatch.digest").read_text().strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest

    pull_env = containers_env(tmp_path, "node-store", registry)
    run(["buildah", "pull", "--quiet", f"{reference}@{digest}"], pull_env)
    image = json.loads(run(["buildah", "inspect", "--type", "image", f"{reference}@{digest}"], pull_env))
    assert image["OCIv1"]["config"]["Labels"]["dev.specwatch.test"] == "carry"
