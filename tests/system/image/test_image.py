"""The image, proven: the repository's Dockerfile is built with buildah and the result runs as UID
65534 on a read-only root.

No container registry is reachable where this runs, so the Dockerfile's base image
(`FROM python:3.12.12-slim-bookworm`) cannot be pulled. The test assembles a stand-in itself: Debian
bookworm (debootstrap, minbase) with Debian's python3 and pip, tagged with exactly the name the
Dockerfile's FROM uses, so the Dockerfile is built unchanged with `--pull=never`. The stand-in differs
from the real base in its Python (Debian's 3.11, which pyproject's requires-python accepts, instead of
3.12) and pip's location; it proves that the Dockerfile's steps, the wheel, its dependencies, the
entrypoint, USER 65534 and the read-only root work together. pip still needs PyPI for setuptools and
the runtime dependencies; the host's CA bundle is copied into the stand-in base so that an
intercepting HTTPS proxy the host trusts is trusted in the build too.

buildah runs as root with chroot isolation and vfs storage (no overlay, no user namespaces needed).
The built image is run without a container runtime: it is mounted (`buildah mount`), bind-mounted
read-only in a private mount namespace with a memory tmpfs on /tmp (as the chart mounts it), and the
entrypoint is started with `chroot --userspec=65534:65534` and the image's environment and working
directory. That is what a kubelet does with the chart's securityContext, minus seccomp and cgroups.

The debootstrap root file system (about 95 s to make) is cached as a tarball under
$SPECWATCH_IMAGE_CACHE (default ~/.cache/specwatch-image), so reruns take about the build time.
Needs root and the Debian packages buildah and debootstrap; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from system.image.needs import needs

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
CACHE = Path(os.environ.get("SPECWATCH_IMAGE_CACHE", Path.home() / ".cache" / "specwatch-image"))
MIRROR = os.environ.get("SPECWATCH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Debian packages of the stand-in base: python3 and pip as the Dockerfile calls them (`python`, `pip`).
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
IMAGE = "localhost/specwatch:image-test"

pytestmark = needs("buildah", "debootstrap")


def from_image() -> str:
    names = re.findall(r"^FROM\s+(?:--\S+\s+)*(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert len(set(names)) == 1, f"one base image expected, found {names}"
    return names[0]


def run(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    assert proc.returncode == 0, (
        f"{shlex.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


class Buildah:
    """buildah with its own vfs storage under the cache dir, so nothing touches the host's images."""

    def __init__(self, store: Path):
        self.flags = ["--root", str(store / "root"), "--runroot", str(store / "run"), "--storage-driver", "vfs"]

    def __call__(self, *args: str, timeout: float = 600) -> str:
        env = {**os.environ, "BUILDAH_ISOLATION": "chroot", "STORAGE_DRIVER": "vfs"}
        return run("buildah", *self.flags, *args, timeout=timeout, env=env).stdout.strip()


def base_rootfs_tarball() -> Path:
    """bookworm minbase + python3 + pip, made once and cached. pip may install system-wide in it, as
    in the official python image (Debian's EXTERNALLY-MANAGED marker is removed)."""
    tarball = CACHE / f"bookworm-minbase-{'-'.join(BASE_PACKAGES)}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = CACHE / "rootfs.partial"
    shutil.rmtree(rootfs, ignore_errors=True)
    run(
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        "bookworm",
        str(rootfs),
        MIRROR,
        timeout=1800,
    )
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    partial = tarball.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for entry in sorted(rootfs.iterdir()):
            tar.add(entry, arcname=entry.name)
    partial.rename(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)
    return tarball


@pytest.fixture(scope="module")
def built_image(tmp_path_factory):
    buildah = Buildah(tmp_path_factory.mktemp("buildah-store"))
    base = from_image()
    container = buildah("from", "scratch")
    buildah("add", container, str(base_rootfs_tarball()), "/")
    # The machine's CA bundle: where HTTPS goes through an intercepting proxy, pip in the build
    # must trust the same roots as pip on the host (Debian's pip reads this file).
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if host_ca.exists():
        buildah("copy", container, str(host_ca), str(host_ca))
    buildah(
        "config",
        "--env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        "LANG=C.UTF-8",
        "--cmd",
        "python3",
        container,
    )
    # The exact name of the Dockerfile's FROM, fully qualified as buildah resolves the short name.
    buildah("commit", "--quiet", container, f"docker.io/library/{base}")
    buildah("rm", container)
    buildah(
        "bud",
        "--isolation",
        "chroot",
        "--pull=never",
        "--layers=false",
        "-t",
        IMAGE,
        "-f",
        str(DOCKERFILE),
        str(ROOT),
        timeout=1200,
    )
    config = json.loads(buildah("inspect", "--type", "image", IMAGE))["OCIv1"]["config"]
    container = buildah("from", "--pull-never", IMAGE)
    mountpoint = buildah("mount", container)
    yield buildah, Path(mountpoint), config
    buildah("umount", container)
    buildah("rm", container)


def run_in_image(image: tuple, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The entrypoint with `args`, as UID/GID 65534, on a read-only bind of the image's root with a
    tmpfs on /tmp, in a private mount namespace (the mounts vanish with it)."""
    _, rootfs, config = image
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    command = [*config["Entrypoint"], *args]
    workdir = config.get("WorkingDir") or "/"
    inner = f"cd {shlex.quote(workdir)} && exec " + shlex.join(command)
    env_args = shlex.join(["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", inner])
    script = " && ".join(
        [
            "new=$(mktemp -d)",
            f'mount --bind {shlex.quote(str(rootfs))} "$new"',
            'mount -o remount,bind,ro "$new"',
            'mount -t tmpfs -o size=16m,mode=1777 tmpfs "$new/tmp"',
            'mount -t proc proc "$new/proc"',
            'mount --rbind /dev "$new/dev"',
            f'exec chroot --userspec=65534:65534 "$new" {env_args}',
        ]
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_built_image_runs_as_65534_with_the_dockerfile_user_entrypoint_and_env(built_image):
    _, _, config = built_image
    assert config["User"] == "65534:65534"
    assert config["Entrypoint"] == ["specwatch"] and config["Cmd"] == ["run"]
    assert "PROMETHEUS_MULTIPROC_DIR" not in "".join(config.get("Env", []))


def test_image_prints_its_version_as_65534_on_a_read_only_root(built_image):
    proc = run_in_image(built_image, "--version")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.fullmatch(r"specwatch \S+\n", proc.stdout), proc.stdout


def test_image_runs_the_demo_as_65534_on_a_read_only_root(built_image):
    proc = run_in_image(built_image, "demo", "--duration", "10s", timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_the_read_only_root_really_is_read_only_for_the_image_user(built_image):
    """The harness itself: a write outside /tmp fails, a write to /tmp works, and the user is 65534."""
    _, rootfs, config = built_image
    probe = (
        "import os, pathlib; print(os.getuid(), os.getgid());"
        "pathlib.Path('/tmp/ok').write_text('x');"
        "\ntry:\n  pathlib.Path('/usr/local/x').write_text('x')\nexcept OSError as e:\n  print('denied', e.errno)"
    )
    image = (built_image[0], rootfs, {**config, "Entrypoint": ["python", "-c", probe]})
    proc = run_in_image(image)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["65534 65534", "denied 30"]  # EROFS
