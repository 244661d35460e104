"""The chart's files/rules and files/dashboards are copies of rules/ and dashboards/ that
helm/specwatch/sync-files makes (git-ignored): made once per session, as `helm package` needs them."""

import subprocess
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[2] / "helm" / "specwatch" / "sync-files"


@pytest.fixture(scope="session", autouse=True)
def _chart_files_synced() -> None:
    subprocess.run([str(SYNC)], check=True, timeout=60)
