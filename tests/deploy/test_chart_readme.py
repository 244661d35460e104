"""The chart README's parameter table is generated from values.yaml (tools/_chart_values.py,
tools/gen_chart_readme.py): each key's `# --` description and value, one home for both; a key without
a description stops the generator, and a hand edit of the table fails its `--check`. The same
descriptions are the chart schema's (tools/gen_chart_schema.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from _chart_values import Parameter, UndocumentedValue, described, parameters  # noqa: E402
from gen_chart_schema import describe_values  # noqa: E402

VALUES = """\
# Default values: a plain comment describes nothing.

# -- How it runs.
#   sidecar:   in the pod.
mode: sidecar

# A group: its keys are the parameters.
image:
  # -- Image repository.
  repository: specwatch/specwatch
  # -- Image tag; empty: appVersion.
  tag: ""

# -- Requests == limits.
resources:
  requests: {cpu: 200m}

# -- Restricted.
# @default -- restricted, 65534
securityContext:
  runAsUser: 65534

config:
  poll_interval: 5s
"""


def test_descriptions_span_their_comment_lines_and_a_described_mapping_is_one_row():
    assert list(parameters(VALUES)) == [
        Parameter("mode", "sidecar", "How it runs. sidecar: in the pod."),
        Parameter("image.repository", "specwatch/specwatch", "Image repository."),
        Parameter("image.tag", '""', "Image tag; empty: appVersion."),
        Parameter("resources", "{requests: {cpu: 200m}}", "Requests == limits."),
        Parameter("securityContext", "restricted, 65534", "Restricted."),
    ]


def test_a_value_without_a_description_is_refused_naming_it():
    text = VALUES.replace("  # -- Image tag; empty: appVersion.\n", "")
    with pytest.raises(UndocumentedValue, match=r"^values\.yaml: image\.tag has no `# --` description$"):
        list(parameters(text))
    # a plain comment above it is not a description
    with pytest.raises(UndocumentedValue, match=r"image\.tag"):
        list(parameters(text.replace('  tag: ""', '  # Image tag.\n  tag: ""')))


def test_a_blank_line_ends_a_description_before_its_key():
    text = VALUES.replace("# -- How it runs.\n#   sidecar:   in the pod.\n", "# -- How it runs.\n\n")
    with pytest.raises(UndocumentedValue, match="mode"):
        list(parameters(text))


def test_the_readme_check_fails_on_a_hand_edited_row_and_the_generator_restores_it(tmp_path):
    readme = (ROOT / "helm" / "specwatch" / "README.md").read_text(encoding="utf-8")
    row = "| `tmpSizeLimit` | `16Mi` |"
    assert row in readme
    path = tmp_path / "README.md"
    path.write_text(readme.replace(row, "| `tmpSizeLimit` | `32Mi` |"), encoding="utf-8")

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "tools" / "gen_chart_readme.py"), str(path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    check = tool("--check")
    assert check.returncode == 1 and "run python tools/gen_chart_readme.py" in check.stderr
    assert tool().returncode == 0 and path.read_text(encoding="utf-8") == readme


def test_the_schema_takes_each_values_description_and_drops_a_hand_written_one():
    schema = {
        "properties": {
            "mode": {"enum": ["sidecar"], "description": "written by hand"},
            "image": {"properties": {"repository": {"type": "string"}, "tag": {"type": "string"}}},
            "resources": {"type": "object", "properties": {"requests": {"description": "by hand too"}}},
            "securityContext": {"type": "object"},
            "config": {"description": "generated from the config declarations"},
        }
    }
    describe_values(schema, described(VALUES))
    members = schema["properties"]
    assert members["mode"]["description"] == "How it runs. sidecar: in the pod."
    assert members["image"]["properties"]["tag"]["description"] == "Image tag; empty: appVersion."
    assert "description" not in members["resources"]["properties"]["requests"]
    assert members["config"]["description"] == "generated from the config declarations"
    del members["securityContext"]
    with pytest.raises(ValueError, match=r"no property securityContext, which values\.yaml describes"):
        describe_values(schema, described(VALUES))
