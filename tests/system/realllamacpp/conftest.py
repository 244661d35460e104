"""Fixtures for the real llama.cpp test (marker `realllamacpp`).

llama-server and the tiny models are cached (SPECWATCH_LLAMACPP_CACHE, default
~/.cache/specwatch-llamacpp). Logs, the recording and sidecar configs go to
SPECWATCH_REALLLAMACPP_ARTIFACTS if set (CI can keep them), else a pytest tmp dir.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llamacpp_harness as harness


@pytest.fixture(scope="session")
def llamacpp_artifacts(tmp_path_factory) -> Path:
    d = os.environ.get("SPECWATCH_REALLLAMACPP_ARTIFACTS")
    if d:
        p = Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("realllamacpp")


@pytest.fixture(scope="session")
def llamacpp_env() -> tuple[Path, Path]:
    """(llama-server, models dir).  Skips only for environmental reasons."""
    try:
        return harness.ensure_llama_server(), harness.ensure_models()
    except harness.EnvironmentUnavailable as e:
        pytest.skip(f"llama-server cannot be built on this machine: {e}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "realllamacpp" in item.keywords:
        for proc in harness.rv.STARTED:
            rep.sections.append((f"log tail: {getattr(proc, 'tag', '?')}", proc.log_tail(60)))
