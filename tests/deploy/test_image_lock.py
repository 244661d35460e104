"""The image is built from requirements.lock: exact versions with sha256 hashes, the whole dependency
closure of pyproject.toml, the versions this test suite runs, installed offline with --require-hashes,
and no pip left in the runtime stage. No registry is reachable here, so nothing is downloaded."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def locked() -> dict[str, tuple[str, list[str]]]:
    """{canonical name: (version, [sha256 hashes])}, parsed strictly."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)", words[0])
        assert match, f"not an exact pin: {words[0]}"
        hashes = []
        for word in words[1:]:
            found = re.fullmatch(r"--hash=sha256:([0-9a-f]{64})", word)
            assert found, f"{words[0]}: only sha256 hashes may follow a pin, got {word}"
            hashes.append(found.group(1))
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"{name} pinned twice"
        assert hashes, f"{words[0]} has no hash: pip --require-hashes would refuse the lock"
        assert len(set(hashes)) == len(hashes), f"{words[0]}: duplicate hash"
        pins[name] = (match.group(2), hashes)
    return pins


def runtime_closure() -> dict[str, Requirement]:
    """pyproject's runtime dependencies and, transitively, theirs (from the installed metadata)."""
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    seen: dict[str, Requirement] = {}
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen[name] = req
        todo.extend(Requirement(r) for r in metadata.requires(req.name) or [])
    return seen


def test_lock_pins_exactly_the_runtime_closure_of_pyproject_with_hashes():
    pins, closure = locked(), runtime_closure()
    assert set(pins) == set(closure), f"lock {sorted(pins)} != dependency closure {sorted(closure)}"
    for name, req in closure.items():
        assert Version(pins[name][0]) in req.specifier, f"{name}=={pins[name][0]} violates {req}"


def test_lock_pins_the_versions_the_test_suite_runs():
    mismatched = {
        name: (version, metadata.version(name))
        for name, (version, _) in locked().items()
        if metadata.version(name) != version
    }
    assert mismatched == {}, f"lock vs installed (regenerate requirements.lock, see its header): {mismatched}"


def test_dockerfile_installs_only_the_hashed_lock_offline_and_removes_pip():
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    runs = [line for line in text.splitlines() if line.startswith("RUN ")]
    build, runtime = runs[0], runs[-1]
    assert "pip download" in build and "--require-hashes" in build and "-r requirements.lock" in build
    assert "--only-binary=:all:" in build, "wheels only: an sdist would run arbitrary build code"
    assert "--no-index" in runtime and "--require-hashes" in runtime and "requirements.lock" in runtime
    assert "--no-deps /wheels/specwatch-" in runtime, "the package's own wheel must not resolve anything further"
    assert "pip check" in runtime
    assert re.search(r'rm -rf "\$site"/pip ', runtime) and "ensurepip" in runtime
    assert 'python -c "import pip"' in runtime, "the build fails if pip survived"
    assert "COPY requirements.lock" in text
    assert not re.search(r"pip install [^&]*(?<!-)(-r )?(?:certifi|prometheus|pyyaml|structlog)", runtime)
