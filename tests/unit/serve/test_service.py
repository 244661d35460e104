"""`specwatch run` as a real process against a local HTTP server serving real vLLM payloads."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from support.cli import run_cli
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
    config.write_text(
        json.dumps(
            {
                "listen": f"127.0.0.1:{port}",
                "poll_interval": "500ms",
                "windows": ["2s", "5s"],
                "targets": [{"name": "vllm", "url": server.url}],
                "routes": [{"name": "chat", "match": {"model_name": "tiny-llama"}, "baseline_itl_p99_seconds": 0.03}],
                "decision": {"min_drafts": 50},
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
    base, _, _ = sidecar

    def have_verdict():
        status = requests.get(base + "/api/v1/status", timeout=2).json()
        windows = status["routes"][0]["windows"] if status["routes"] else {}
        return status if windows.get("2s", {}).get("acceptance_rate") else None

    status = wait_for(have_verdict)
    route = status["routes"][0]
    assert route["route"] == "chat" and route["schema"] == "v1" and route["configured_k"] == 4
    window = route["windows"]["2s"]
    assert 0.5 < window["acceptance_rate"] < 1.0
    assert window["verdict"] in ("keep", "shorten", "disable", "undecided", "insufficient_data")
    metrics = requests.get(base + "/metrics", timeout=2).text
    for name in (
        "specwatch_acceptance_ratio{",
        "specwatch_drafts_total{",
        "specwatch_itl_seconds_bucket{",
        "specwatch_target_up{",
        "specwatch_route_info{",
        "specwatch_build_info{",
        "specwatch_baseline_itl_p99_seconds{",
        "specwatch_verdict{",
    ):
        assert name in metrics, name
    assert requests.get(base + "/healthz", timeout=2).status_code == 200
    assert "/metrics" in requests.get(base + "/", timeout=2).text
    assert requests.get(base + "/nope", timeout=2).status_code == 404
    assert requests.post(base + "/metrics", timeout=2).status_code == 405


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_exported_metrics_pass_promtool_check_metrics(sidecar):
    base, _, _ = sidecar
    wait_for(lambda: "specwatch_acceptance_ratio{" in requests.get(base + "/metrics", timeout=2).text)
    body = requests.get(base + "/metrics", timeout=2).text
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_target_failure_keeps_serving_and_counts_the_error_by_reason(sidecar):
    base, _, server = sidecar
    wait_for(lambda: 'specwatch_target_up{target="vllm"} 1.0' in requests.get(base + "/metrics", timeout=2).text)
    server.status = 500
    text = wait_for(
        lambda: (
            (t := requests.get(base + "/metrics", timeout=2).text)
            and 'specwatch_target_up{target="vllm"} 0.0' in t
            and t
        )
    )
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
    config.write_text(
        json.dumps(
            {
                "listen": f"127.0.0.1:{port}",
                "poll_interval": "500ms",
                "windows": ["2s"],
                "targets": [
                    {"name": "hung", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/metrics", "timeout": "450ms"},
                    {"name": "hung-too", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/x", "timeout": "450ms"},
                    {"name": "good", "url": good.url, "timeout": "450ms"},
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


# -- config reload in place (SIGHUP and file change) and sidecar mode ----------------------------


class ConfigMapDir:
    """A directory laid out like a mounted ConfigMap: specwatch.yaml -> ..data/specwatch.yaml, and an
    update is the kubelet's atomic swap of the ..data symlink to a new timestamped directory."""

    def __init__(self, root: Path):
        self.root = root
        self.generation = 0
        root.mkdir(parents=True, exist_ok=True)
        (root / "specwatch.yaml").symlink_to("..data/specwatch.yaml")

    @property
    def path(self) -> Path:
        return self.root / "specwatch.yaml"

    def publish(self, document: dict | str) -> None:
        self.generation += 1
        version = self.root / f"..2026_11_30_{self.generation:04d}"
        version.mkdir()
        text = document if isinstance(document, str) else json.dumps(document)
        (version / "specwatch.yaml").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.root / "..data")


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def start_run(config_path: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run", "--config", str(config_path), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def stderr_lines_after_stop(proc: subprocess.Popen) -> list[dict]:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=5)
    return [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]


@pytest.fixture
def reloadable(tmp_path):
    files = sorted(fixture_path("vllm-cpu-real").glob("0[2-3]*.prom"))
    server = PayloadServer(p.read_text() for p in files)
    port = free_port()
    good = {
        "listen": f"127.0.0.1:{port}",
        "poll_interval": "300ms",
        "windows": ["2s", "5s"],
        "targets": [{"name": "vllm", "url": server.url}],
        "routes": [{"name": "chat", "match": {"model_name": "tiny-llama"}}],
        "decision": {"min_drafts": 50, "hold": 3},
    }
    configmap = ConfigMapDir(tmp_path / "config")
    configmap.publish(good)
    proc = start_run(configmap.path)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(base + "/healthz"))
    yield base, proc, configmap, good
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=5)
    server.stop()


def target_polls(base: str) -> int:
    return int(requests.get(base + "/api/v1/status", timeout=2).json()["targets"][0]["polls"])


def route_samples(base: str) -> int:
    status = requests.get(base + "/api/v1/status", timeout=2).json()
    windows = status["routes"][0]["windows"] if status["routes"] else {}
    return int(windows.get("5s", {}).get("samples") or 0)


def test_a_changed_configmap_is_applied_in_place_and_a_bad_one_refused_keeping_the_old(reloadable):
    base, proc, configmap, good = reloadable
    wait_for(lambda: route_samples(base) >= 3)
    metrics = requests.get(base + "/metrics", timeout=2).text
    assert metric_value(metrics, "specwatch_config_last_reload_successful") == 1.0
    first_success = metric_value(metrics, "specwatch_config_last_reload_success_timestamp_seconds")
    assert first_success is not None

    configmap.publish({**good, "decision": {"min_drafts": 50, "hold": "banana"}})
    wait_for(
        lambda: (
            metric_value(requests.get(base + "/metrics", timeout=2).text, "specwatch_config_last_reload_successful")
            == 0.0
        )
    )
    samples_before, polls_before = route_samples(base), target_polls(base)
    wait_for(lambda: target_polls(base) > polls_before + 2)  # the old config keeps polling
    metrics = requests.get(base + "/metrics", timeout=2).text
    assert metric_value(metrics, "specwatch_config_last_reload_success_timestamp_seconds") == first_success

    configmap.publish({**good, "decision": {"min_drafts": 50, "hold": 5}})
    wait_for(
        lambda: (
            metric_value(requests.get(base + "/metrics", timeout=2).text, "specwatch_config_last_reload_successful")
            == 1.0
        )
    )
    # Targets and windows did not change: the windows' history survived the reload.
    assert route_samples(base) >= samples_before
    metrics = requests.get(base + "/metrics", timeout=2).text
    assert metric_value(metrics, "specwatch_config_last_reload_success_timestamp_seconds") > first_success
    assert proc.poll() is None

    logs = stderr_lines_after_stop(proc)
    assert proc.returncode == 0
    refused = [line for line in logs if line["event"] == "config_reload_failed"]
    assert len(refused) == 1 and "decision.hold" in refused[0]["error"]
    applied = [line for line in logs if line["event"] == "config_reloaded"]
    assert len(applied) == 1 and applied[0]["rebuilt"] == [] and applied[0]["trigger"] == "file"
    assert sum(line["event"] == "started" for line in logs) == 1  # no restart


def test_sighup_reloads_the_config_instead_of_killing_the_process(reloadable):
    base, proc, configmap, good = reloadable
    wait_for(lambda: route_samples(base) >= 2)
    # Written in place (no swap), so only the signal can make it apply before the next stat sees it.
    version = (configmap.root / "..data").resolve()
    (version / "specwatch.yaml").write_text(json.dumps({**good, "windows": ["7s"]}))
    proc.send_signal(signal.SIGHUP)
    status = wait_for(lambda: (s := requests.get(base + "/api/v1/status", timeout=2).json())["windows"] == ["7s"] and s)
    assert status["windows"] == ["7s"] and proc.poll() is None
    proc.send_signal(signal.SIGHUP)  # a second signal with the same good file re-applies it, harmlessly
    time.sleep(0.5)
    assert proc.poll() is None
    logs = stderr_lines_after_stop(proc)
    applied = [line for line in logs if line["event"] == "config_reloaded"]
    assert applied and applied[0]["rebuilt"] == ["pipeline"]  # new windows: history starts afresh
    assert "signal" in {line["trigger"] for line in applied}


@pytest.mark.parametrize("bad", ["missing", "windows: [nope]\n"])
def test_sidecar_mode_stays_up_on_a_bad_config_and_recovers_when_it_is_fixed(tmp_path, bad):
    server = PayloadServer([fixture_path("vllm-cpu-real", "030.prom").read_text()])
    port = free_port()
    configmap = ConfigMapDir(tmp_path / "config")
    if bad != "missing":
        configmap.publish(bad)
    proc = start_run(configmap.path, "--listen", f"127.0.0.1:{port}", env={"SPECWATCH_MODE": "sidecar"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(base + "/healthz"))
        time.sleep(1.5)  # several idle ticks: still up, still live
        assert proc.poll() is None and answers(base + "/healthz")
        metrics = requests.get(base + "/metrics", timeout=2).text
        assert metric_value(metrics, "specwatch_config_last_reload_successful") == 0.0
        assert "specwatch_target_up{" not in metrics  # nothing is polled without a config
        readyz = requests.get(base + "/readyz", timeout=2)
        assert readyz.status_code == 503 and readyz.text.startswith("config error: "), readyz.text

        configmap.publish(
            {
                "listen": f"127.0.0.1:{port}",
                "poll_interval": "300ms",
                "targets": [{"name": "vllm", "url": server.url}],
                "shutdown_drain": "0s",  # exit at SIGTERM, vLLM still up (tests/system/reliability/test_drain.py)
            }
        )
        wait_for(lambda: 'specwatch_target_up{target="vllm"} 1.0' in requests.get(base + "/metrics", timeout=2).text)
        assert (
            metric_value(requests.get(base + "/metrics", timeout=2).text, "specwatch_config_last_reload_successful")
            == 1.0
        )
        logs = stderr_lines_after_stop(proc)
        assert proc.returncode == 0
        errors = [line for line in logs if line["event"] == "config_error"]
        assert len(errors) == 1
        assert ("not found" in errors[0]["error"]) if bad == "missing" else ("windows[0]" in errors[0]["error"])
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()


def test_without_sidecar_mode_a_bad_config_still_exits_2_naming_the_key(tmp_path):
    config = tmp_path / "specwatch.yaml"
    config.write_text("windows: [nope]\n")
    proc = run_cli("run", "--config", str(config), env={**os.environ, "SPECWATCH_MODE": ""})
    assert proc.returncode == 2 and "windows[0]" in proc.stderr


@pytest.mark.parametrize("window, warned", [("5m", True), ("15m", False)])
def test_check_config_warns_when_the_alert_window_is_not_a_configured_window(tmp_path, window, warned):
    config = tmp_path / "specwatch.yaml"
    config.write_text("windows: [1m, 15m]\n")
    proc = run_cli("check-config", str(config), env={**os.environ, "SPECWATCH_ALERT_WINDOW": window})
    assert proc.returncode == 0, proc.stderr
    assert ('window="5m"' in proc.stderr and "can never fire" in proc.stderr) == warned, proc.stderr


def test_check_config_reads_the_alert_window_from_the_config_file(tmp_path):
    config = tmp_path / "specwatch.yaml"
    config.write_text("windows: [1m, 15m]\nalerting: {window: 15m}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SPECWATCH_ALERT_WINDOW", "SPECWATCH_ALERTING__WINDOW")}
    quiet = run_cli("check-config", str(config), env=env)
    assert quiet.returncode == 0 and "can never fire" not in quiet.stderr, quiet.stderr
    flagged = run_cli("check-config", str(config), "--alert-window", "5m", env=env)
    assert flagged.returncode == 0 and 'window="5m"' in flagged.stderr, flagged.stderr


def test_a_bad_alert_window_flag_exits_2_naming_the_flag(tmp_path):
    config = tmp_path / "specwatch.yaml"
    config.write_text("windows: [1m, 5m]\n")
    proc = run_cli("check-config", str(config), "--alert-window", "soon")
    assert proc.returncode == 2 and "--alert-window" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "environ, flag, expected",
    [
        ({}, None, 900.0),  # the file
        ({"SPECWATCH_ALERT_WINDOW": "1m"}, None, 60.0),  # the older variable beats the file
        ({"SPECWATCH_ALERTING__WINDOW": "1m"}, None, 60.0),  # so does the derived one
        ({"SPECWATCH_ALERTING__WINDOW": "1m", "SPECWATCH_ALERT_WINDOW": "15m"}, None, 60.0),  # the derived name wins
        ({"SPECWATCH_ALERTING__WINDOW": "1m"}, 300.0, 300.0),  # the flag beats both
    ],
)
def test_the_alert_window_comes_from_the_flag_then_the_environment_then_the_file(tmp_path, environ, flag, expected):
    from specwatch.config import load

    config = tmp_path / "specwatch.yaml"
    config.write_text("windows: [1m, 5m, 15m]\nalerting: {window: 15m}\n")
    overrides = {"alerting": {"window": flag}} if flag else None
    assert load(str(config), environ=environ, overrides=overrides).alerting.window == expected


def test_a_reload_that_drops_the_alert_window_warns_once_and_one_that_keeps_it_stays_quiet():
    from dataclasses import replace

    from specwatch.base.logsetup import capture_logs
    from specwatch.config import from_mapping
    from specwatch.serve.service import Service

    good = from_mapping({"windows": ["1m", "5m"]}, environ={})
    with capture_logs() as logs:
        service = Service(good)
        service.apply(replace(good, decision=replace(good.decision, hold=5)))  # windows untouched
        service.apply(from_mapping({"windows": ["1m", "15m"]}, environ={}))  # 5m gone
        service.apply(from_mapping({"windows": ["1m", "15m"], "decision": {"hold": 4}}, environ={}))
        service.apply(from_mapping({"windows": ["1m", "15m"], "alerting": {"window": "15m"}}, environ={}))
    warnings = [line for line in logs if line["event"] == "alert_window_not_in_windows"]
    assert len(warnings) == 1 and 'window="5m"' in warnings[0]["message"]


def test_run_warns_once_at_start_when_the_alert_window_is_not_a_configured_window(tmp_path):
    port = free_port()
    config = tmp_path / "specwatch.yaml"
    config.write_text(
        json.dumps(
            {
                "listen": f"127.0.0.1:{port}",
                "windows": ["1m", "15m"],
                "targets": [{"url": f"http://127.0.0.1:{free_port()}/metrics"}],
            }
        )
    )
    proc = start_run(config, "--alert-window", "5m")
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/healthz"))
        logs = stderr_lines_after_stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    warnings = [line for line in logs if line["event"] == "alert_window_not_in_windows"]
    assert len(warnings) == 1 and "can never fire" in warnings[0]["message"]


def test_a_target_pinned_to_another_engine_is_logged_once_as_engine_mismatch_and_counted_per_poll():
    from specwatch.base.logsetup import capture_logs
    from specwatch.config import from_mapping
    from specwatch.serve.service import Service

    server = PayloadServer([fixture_path("vllm-cpu-real", "030.prom").read_text()])
    config = from_mapping(
        {"poll_interval": "5s", "windows": ["1m"], "targets": [{"name": "t", "url": server.url, "engine": "sglang"}]},
        environ={},
    )
    service = Service(config)
    try:
        with capture_logs() as logs:
            for _ in range(3):
                service.poll_once()
    finally:
        service.stop()
        server.stop()
    rejected = [line for line in logs if line["event"] == "target_rejected"]
    assert len(rejected) == 1 and rejected[0]["reason"] == "engine_mismatch"
    assert "looks like vllm" in rejected[0]["error"]
    (target,) = service.poller.pipeline.state().targets
    assert target.errors["engine_mismatch"] == 3 and target.payload_engine == "vllm"


def test_stop_signals_are_taken_one_per_wait_and_a_wait_without_one_times_out():
    from specwatch.serve.service import StopSignals

    signals = StopSignals()
    try:
        assert signals.wait(0) is False
        signals.note(15, None)
        signals.note(15, None)
        assert signals.wait(0) is True
        assert signals.wait(0) is True  # the second signal: a drain's "exit at once"
        assert signals.wait(0.01) is False
    finally:
        signals.close()


def test_a_sighup_met_by_the_wait_is_handed_on_and_the_wait_goes_on():
    from specwatch.serve.service import StopSignals

    reloads = []
    signals = StopSignals(on_reload=lambda: reloads.append(1))
    try:
        signals.note_reload(1, None)
        assert signals.wait(0.01) is False and reloads == [1]  # a reload is not a stop
        signals.note_reload(1, None)
        signals.note(15, None)
        assert signals.wait(0) is True and reloads == [1, 1]
    finally:
        signals.close()


def test_the_sighup_handler_takes_no_lock_the_main_thread_may_hold():
    # A handler runs in the main thread between two bytecodes: one that set the poll thread's Event
    # (a lock inside) while the main thread held that lock, stopping or draining, waited forever.
    from specwatch.config import from_mapping
    from specwatch.serve.service import Service

    config = from_mapping(
        {"listen": "127.0.0.1:0", "targets": [{"name": "vllm", "url": f"http://127.0.0.1:{free_port()}/metrics"}]},
        environ={},
    )
    before = signal.getsignal(signal.SIGHUP)
    service = Service(config)
    reloads, outcome = [], {}
    request_reload = service.request_reload
    service.request_reload = lambda: (reloads.append(1), request_reload())  # type: ignore[method-assign]

    def while_running():
        handler = signal.getsignal(signal.SIGHUP)
        with service._stop._cond:  # the lock Event.set takes, held as the main thread would hold it to stop
            caller = threading.Thread(target=handler, args=(signal.SIGHUP, None), daemon=True)
            caller.start()
            caller.join(timeout=2.0)
            outcome["returned_under_the_lock"] = not caller.is_alive()
        os.kill(os.getpid(), signal.SIGHUP)  # a real one
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(reloads) < 2:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Timer(0.5, while_running).start()
    assert service.run_forever() == 0
    assert outcome["returned_under_the_lock"], "the SIGHUP handler blocked on a lock"
    assert len(reloads) == 2, "each SIGHUP asks for a reload, outside its handler"
    assert signal.getsignal(signal.SIGHUP) == before


def test_run_forever_stops_on_sigterm_and_gives_the_signal_handlers_back():
    from specwatch.config import from_mapping
    from specwatch.serve.service import Service

    config = from_mapping(
        {"listen": "127.0.0.1:0", "targets": [{"name": "vllm", "url": f"http://127.0.0.1:{free_port()}/metrics"}]},
        environ={},
    )
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    service = Service(config)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    assert service.run_forever() == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
