"""What the image tests need of this machine, as the skip markers of a test module: the Debian packages
whose commands it runs, and root for those that need it (buildah with chroot isolation and vfs storage,
debootstrap)."""

from __future__ import annotations

import os
import shutil

import pytest

# Each tool that needs root here, as a skip reason names it.
ROOT_TOOLS = {"buildah": "buildah (chroot isolation, vfs)", "debootstrap": "debootstrap"}


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def needs(*packages: str) -> list[pytest.MarkDecorator]:
    """Skip unless each package's command is on PATH, and unless root where one of them needs it."""
    rooted = [ROOT_TOOLS[p] for p in packages if p in ROOT_TOOLS]
    markers = [
        pytest.mark.skipif(
            not all(shutil.which(p) for p in packages),
            reason=f"needs the Debian packages {_listed(list(packages))}",
        )
    ]
    if rooted:
        verb = "needs" if len(rooted) == 1 else "need"
        markers.append(pytest.mark.skipif(os.geteuid() != 0, reason=f"{_listed(rooted)} {verb} root here"))
    return markers
