"""Fixtures for the real-vLLM integration test (marker `realvllm`).

The vLLM venv and the tiny model are cached (SPECWATCH_VLLM_CACHE, default
~/.cache/specwatch-vllm).  Logs, recordings and sidecar configs go to
SPECWATCH_REALVLLM_ARTIFACTS if set (CI can keep them), else a pytest tmp dir.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realvllm_harness as harness


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    d = os.environ.get("SPECWATCH_REALVLLM_ARTIFACTS")
    if d:
        p = Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("realvllm")


@pytest.fixture(scope="session")
def vllm_env() -> tuple[Path, Path]:
    """(python of the vLLM venv, tiny model dir).  Skips only for environmental reasons."""
    try:
        py = harness.ensure_vllm_venv()
    except harness.EnvironmentUnavailable as e:
        pytest.skip(f"vLLM CPU venv cannot be built on this machine: {e}")
    return py, harness.ensure_tiny_model(py)


@pytest.fixture(scope="session")
def server_pool(vllm_env, artifacts):
    """Servers started ahead of their fixtures (their start-ups overlap); those never taken are
    stopped at the end of the session."""
    pool = harness.ServerPool(vllm_env, artifacts)
    yield pool
    pool.stop_untaken()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "realvllm" in item.keywords:
        for proc in harness.STARTED:
            rep.sections.append((f"log tail: {getattr(proc, 'tag', '?')}", proc.log_tail(60)))
