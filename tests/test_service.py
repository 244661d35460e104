"""`specwatch run` as a real process against a local HTTP server serving real vLLM payloads."""

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from support.loopback import free_port, wait_http
from support.paths import fixture_path


class PayloadServer:
    """Serves a sequence of real fixture payloads, one per request, then repeats the last."""

    def __init__(self, payloads):
        self.payloads = list(payloads)
        self.index = 0
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = outer.payloads[min(outer.index, len(outer.payloads) - 1)].encode()
                outer.index += 1
                self.send_response(outer.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sidecar(tmp_path):
    files = sorted(fixture_path("vllm-cpu-real").glob("0[2-3]*.prom"))
    server = PayloadServer(p.read_text() for p in files)
    port = free_port()
    config = tmp_path / "specwatch.yaml"
    config.write_text(json.dumps({
        "listen": f"127.0.0.1:{port}", "poll_interval": "500ms", "windows": ["2s", "5s"],
        "targets": [{"name": "vllm", "url": server.url}],
        "routes": [{"name": "chat", "match": {"model_name": "tiny-llama"}, "baseline_itl_p99_seconds": 0.03}],
        "decision": {"min_drafts": 50},
    }))
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "run", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/readyz", 20, proc)
    yield base, proc, server
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=5)
    server.stop()


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_run_serves_metrics_and_status_over_http_from_real_payloads(sidecar):
    base, proc, _ = sidecar

    def have_verdict():
        status = requests.get(base + "/api/v1/status", timeout=2).json()
        windows = status["routes"][0]["windows"] if status["routes"] else {}
        return status if windows.get("2s", {}).get("acceptance_rate") else None

    status = wait_for(have_verdict)
    route = status["routes"][0]
    assert route["route"] == "chat" and route["schema"] == "v1" and route["configured_k"] == 4
    window = route["windows"]["2s"]
    assert 0.5 < window["acceptance_rate"] < 1.0
    assert window["verdict"] in ("keep", "shorten", "disable", "insufficient_data")
    metrics = requests.get(base + "/metrics", timeout=2).text
    for name in ("specwatch_acceptance_rate{", "specwatch_drafts_total{", "specwatch_itl_seconds_bucket{",
                 "specwatch_target_up{", "specwatch_route_info{", "specwatch_build_info{",
                 "specwatch_baseline_itl_p99_seconds{", 'specwatch_verdict{'):
        assert name in metrics, name
    assert requests.get(base + "/healthz", timeout=2).status_code == 200
    assert "/metrics" in requests.get(base + "/", timeout=2).text
    assert requests.get(base + "/nope", timeout=2).status_code == 404
    assert requests.post(base + "/metrics", timeout=2).status_code == 405


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_exported_metrics_pass_promtool_check_metrics(sidecar):
    base, _, _ = sidecar
    wait_for(lambda: "specwatch_acceptance_rate{" in requests.get(base + "/metrics", timeout=2).text)
    body = requests.get(base + "/metrics", timeout=2).text
    proc = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_target_failure_keeps_serving_and_counts_the_error_by_reason(sidecar):
    base, _, server = sidecar
    wait_for(lambda: 'specwatch_target_up{target="vllm"} 1.0' in requests.get(base + "/metrics", timeout=2).text)
    server.status = 500
    text = wait_for(lambda: (t := requests.get(base + "/metrics", timeout=2).text)
                    and 'specwatch_target_up{target="vllm"} 0.0' in t and t)
    assert 'specwatch_scrape_errors_total{reason="http_status",target="vllm"}' in text
    assert requests.get(base + "/readyz", timeout=2).status_code == 200  # readiness never depends on vLLM
    server.status = 200
    wait_for(lambda: 'specwatch_target_up{target="vllm"} 1.0' in requests.get(base + "/metrics", timeout=2).text)


def test_sigterm_exits_within_two_seconds_with_a_final_log_line(sidecar):
    _, proc, _ = sidecar
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=5)
    assert time.monotonic() - start < 2.0
    assert proc.returncode == 0
    stderr = proc.stderr.read()
    assert '"event": "stopped"' in stderr


def test_a_hung_target_does_not_slow_the_polls_of_the_others(tmp_path):
    import socket
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # the kernel accepts connections; nobody ever answers
    good = PayloadServer([fixture_path("vllm-cpu-real", "030.prom").read_text()])
    port = free_port()
    config = tmp_path / "two.yaml"
    config.write_text(json.dumps({
        "listen": f"127.0.0.1:{port}", "poll_interval": "500ms", "windows": ["2s"],
        "targets": [{"name": "hung", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/metrics", "timeout": "450ms"},
                    {"name": "hung-too", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/x", "timeout": "450ms"},
                    {"name": "good", "url": good.url, "timeout": "450ms"}],
    }))
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "run", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        def ready():
            try:
                return requests.get(base + "/readyz", timeout=1).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(ready)
        first = {t["name"]: t for t in requests.get(base + "/api/v1/status", timeout=2).json()["targets"]}
        time.sleep(5.0)
        last = {t["name"]: t for t in requests.get(base + "/api/v1/status", timeout=2).json()["targets"]}
        assert last["good"]["up"] is True and last["hung"]["up"] is False
        assert last["hung"]["errors"]["timeout"] >= 3
        # Ten intervals passed: the good target kept its cadence although both hung polls ran to their
        # deadlines (polled one after the other they would take 900 ms of every 500 ms interval).
        assert last["good"]["polls"] - first["good"]["polls"] >= 8
    finally:
        proc.kill()
        proc.wait(timeout=5)
        good.stop()
        hung.close()
