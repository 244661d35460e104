"""Each mode imports only its own Source: a polling sidecar holds no fleet-mode module and fleet
mode none of the sidecar's scraper and pipeline; logging as the CLI sets it up loads no structlog;
a serving sidecar renders /metrics without prometheus_client (each checked in a fresh interpreter,
after polls)."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = r"""
import json, sys
from specwatch.config import from_mapping
from specwatch.base.logsetup import configure_logging
from specwatch.serve.service import Service
config = from_mapping(json.loads(sys.argv[1]), environ={})
configure_logging(config.log.format, config.log.level)
service = Service(config)
service.poll_once()
service.poll_once()
print("MODULES " + json.dumps([type(service.poller).__name__, *sys.modules]))
"""

_SERVING = r"""
import http.client, json, sys
from specwatch.config import from_mapping
from specwatch.serve.service import Service
service = Service(from_mapping(json.loads(sys.argv[1]), environ={}))
service.start()
service.poll_once()
host, port = service.httpd.server_address[:2]
for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/metrics", headers={"Accept": accept})
    answer = conn.getresponse()
    assert answer.status == 200 and b"process_cpu_seconds_total" in answer.read(), accept
    conn.close()
service.stop()
print("MODULES " + json.dumps(sorted(sys.modules)))
"""

#: Closed loopback ports: every poll fails fast, as a target or a Prometheus that is not up yet.
SIDECAR = {"targets": [{"name": "vllm", "url": "http://127.0.0.1:9/metrics"}], "listen": "127.0.0.1:0"}
FLEET = {"prometheus": {"url": "http://127.0.0.1:9"}, "listen": "127.0.0.1:0"}


def _polled(config: dict) -> tuple[str, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(config)], capture_output=True, text=True, check=True, timeout=60
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("MODULES "))  # logs go to stdout too
    poller, *modules = json.loads(line.removeprefix("MODULES "))
    return poller, set(modules)


def test_a_polling_sidecar_imports_no_fleet_mode_module():
    poller, modules = _polled(SIDECAR)
    assert poller == "TargetsSource"
    assert {m for m in modules if m.startswith("specwatch.fleet")} == set()


def test_fleet_mode_imports_neither_the_sidecars_source_nor_its_pipeline():
    poller, modules = _polled(FLEET)
    assert poller == "QuerySource"
    assert "specwatch.fleet.evaluator" in modules
    assert {"specwatch.sidecar.source", "specwatch.sidecar.pipeline"} & modules == set()


def test_a_polling_sidecar_logging_json_imports_neither_structlog_nor_asyncio():
    _, modules = _polled({**SIDECAR, "log": {"format": "json"}})
    assert {m for m in modules if m.split(".")[0] in ("structlog", "asyncio")} == set()


def test_a_serving_sidecar_renders_metrics_without_prometheus_client():
    out = subprocess.run(
        [sys.executable, "-c", _SERVING, json.dumps(SIDECAR)], capture_output=True, text=True, check=True, timeout=60
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("MODULES "))
    modules = json.loads(line.removeprefix("MODULES "))
    assert "specwatch.export.metrics_text" in modules
    assert [m for m in modules if m.split(".")[0] == "prometheus_client"] == []


def test_a_polling_sidecar_loads_neither_the_page_nor_the_status_renderer_nor_error_helpers_before_asked():
    _, modules = _polled(SIDECAR)
    assert {"specwatch.export.page", "specwatch.export.status", "difflib", "shlex"} & modules == set()
    assert "specwatch.export.page_history" in modules  # the page's history is recorded every poll


def test_a_polling_sidecar_configured_without_a_file_loads_no_pyyaml():
    _, modules = _polled(SIDECAR)
    assert {m for m in modules if m.split(".")[0] in ("yaml", "_yaml")} == set()
