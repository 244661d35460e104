"""The chart's files/rules and files/dashboards: copies of the repository's rules/ and dashboards/
made by helm/specwatch/sync-files (no symlinks, so Helm renders the chart directory without a
warning), packaged by `helm package` as they are, and asked for by name when a source checkout
enables rules or dashboards without them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "specwatch"
SYNC = CHART / "sync-files"
MONITORING = {
    "podMonitor": {"enabled": True, "selectorOverride": {"app": "vllm"}},
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True},
}
SOURCES = {"rules": "*.yaml", "dashboards": "*.json"}

helm = pytest.importorskip("helm_python", reason="helm-python-sdk==0.2.2 is a test dependency")

RENDER_AND_LINT = r"""
import json, sys
import helm_python as helm
chart_dir, values = sys.argv[1], json.loads(sys.argv[2])
with helm.Chart.load(chart_dir) as chart:
    files = chart.render(values, name="specwatch", namespace="llm")
report = helm.lint(chart_dir, values, strict=True)
print(json.dumps({"files": sorted(files), "lint": report}, default=str))
"""


def test_rendering_and_linting_the_chart_directory_prints_no_warning():
    """Helm's loader logs "found symbolic link in path" for every symlink in a chart directory (on
    stderr, whatever the caller's logging): the chart holds none, so a render and a lint are silent."""
    assert not [p for p in CHART.rglob("*") if p.is_symlink()]
    done = subprocess.run(
        [sys.executable, "-c", RENDER_AND_LINT, str(CHART), json.dumps(MONITORING)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "specwatch/templates/prometheusrule.yaml" in json.loads(done.stdout)["files"]


def test_the_package_holds_exactly_the_repositorys_rules_and_dashboards_and_not_the_sync_script(tmp_path):
    archive = Path(helm.package(str(CHART), destination=str(tmp_path)))
    with tarfile.open(archive) as tar:
        packaged = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.startswith("specwatch/files/")
        }
        names = set(tar.getnames())
    expected = {
        f"specwatch/files/{source}/{path.name}": path.read_bytes()
        for source, pattern in SOURCES.items()
        for path in sorted((ROOT / source).glob(pattern))
    }
    assert packaged == expected
    assert "specwatch/sync-files" not in names and "specwatch/files/.gitignore" not in names


def _checkout(tmp_path: Path) -> Path:
    """A copy of what git tracks around the chart: rules/, dashboards/ and the chart without files/."""
    for source in SOURCES:
        shutil.copytree(ROOT / source, tmp_path / source)
    shutil.copytree(CHART, tmp_path / "helm" / "specwatch", ignore=shutil.ignore_patterns("rules", "dashboards"))
    return tmp_path / "helm" / "specwatch"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"prometheusRule": {"enabled": True}}, "prometheusRule.enabled: the chart's files/rules/ is empty"),
        ({"dashboards": {"enabled": True}}, "dashboards.enabled: the chart's files/dashboards/ is empty"),
    ],
)
def test_a_checkout_without_the_copies_renders_the_defaults_and_names_sync_files_for_rules_or_dashboards(
    tmp_path, values, message
):
    chart_dir = _checkout(tmp_path)
    with helm.Chart.load(str(chart_dir)) as chart:
        assert chart.render({}, name="specwatch", namespace="llm")
        with pytest.raises(helm.HelmRenderError) as err:
            chart.render(values, name="specwatch", namespace="llm")
    assert message in str(err.value) and "helm/specwatch/sync-files" in str(err.value)


def _sync(chart_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(chart_dir / "sync-files"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_sync_files_copies_the_sources_and_check_names_a_changed_added_or_removed_file(tmp_path):
    chart_dir = _checkout(tmp_path)
    assert _sync(chart_dir, "--check").returncode == 1, "nothing copied yet"
    assert _sync(chart_dir).returncode == 0
    assert _sync(chart_dir, "--check").returncode == 0
    with helm.Chart.load(str(chart_dir)) as chart:
        rendered = chart.render(MONITORING, name="specwatch", namespace="llm")
    assert yaml.safe_load(rendered["specwatch/templates/prometheusrule.yaml"])["spec"]["groups"]
    assert not (chart_dir / "files" / "rules" / "tests").exists(), "rules/tests (promtool's) is not copied"

    alerts = tmp_path / "rules" / "specwatch-alerts.yaml"
    alerts.write_text(alerts.read_text() + "\n# changed\n")
    done = _sync(chart_dir, "--check")
    assert done.returncode == 1 and "files/rules/specwatch-alerts.yaml differs" in done.stderr
    (tmp_path / "dashboards" / "extra.json").write_text("{}")
    assert _sync(chart_dir).returncode == 0 and _sync(chart_dir, "--check").returncode == 0
    assert (chart_dir / "files" / "rules" / "specwatch-alerts.yaml").read_bytes() == alerts.read_bytes()

    (tmp_path / "dashboards" / "extra.json").unlink()
    done = _sync(chart_dir, "--check")
    assert done.returncode == 1 and "files/dashboards holds" in done.stderr
    assert _sync(chart_dir).returncode == 0
    assert not (chart_dir / "files" / "dashboards" / "extra.json").exists(), "a removed source leaves no copy"


def test_the_icon_is_the_repositorys_svg_by_the_url_it_has_once_published_and_lint_asks_for_nothing():
    import xml.etree.ElementTree as ET

    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    repo = meta["home"].removeprefix("https://github.com/")
    prefix = f"https://raw.githubusercontent.com/{repo}/main/"
    assert meta["icon"].startswith(prefix), meta["icon"]
    svg = ROOT / meta["icon"].removeprefix(prefix)
    assert svg.is_file(), f"{svg} is what the icon URL serves"
    root = ET.fromstring(svg.read_text())
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox") == "0 0 64 64"
    assert svg.stat().st_size < 4096, "an icon, not an illustration"
    report = helm.lint(str(CHART), {}, strict=True)
    assert report["errors"] == [] and report["messages"] == [], report
