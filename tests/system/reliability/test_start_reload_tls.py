"""Three ways the sidecar used to be hurt by its surroundings:

- a SIGHUP while `specwatch run` starts (a ConfigMap update, a `kill -HUP` from a script) killed it:
  the handler was installed after the slow imports and the config load. Now main() queues SIGHUP
  first thing and the service replays it as a reload;
- a config path that blocks on open or read (a FIFO) wedged the poll loop while /metrics served
  frozen numbers: it is now refused as a failed reload and polling goes on;
- a TLS certificate failure was counted as scrape error `connect`: it is now `tls`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from specwatch.config import ConfigError
from specwatch.serve.reload import ConfigSource
from specwatch.sidecar.scrape import ScrapeError, Scraper
from support.loopback import free_port

from .harness import Sidecar
from .hostile import HostileServer, respond
from .process import sidecar_process, spawn_sidecar

FAST = {"poll_interval": "500ms", "windows": ["2s", "5s"], "log": {"format": "json", "level": "debug"}}


def _sighup_caught(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def _loaded(pid: int, library: str) -> bool:
    """Whether the process has mapped an extension module (a sign of how far its imports went)."""
    return library in Path(f"/proc/{pid}/maps").read_text()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_sighup_during_start_up_never_kills_the_sidecar_and_is_replayed_as_a_reload(tmp_path):
    port = free_port()
    config = {**FAST, "listen": f"127.0.0.1:{port}", "targets": [{"url": "http://127.0.0.1:9/metrics"}]}
    running = spawn_sidecar(tmp_path, config)
    proc, log_path = running.proc, running.log_path
    try:
        deadline = time.monotonic() + 20
        while not _sighup_caught(proc.pid):  # the handler is in place: from here on, no SIGHUP may kill it
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.001)
        # Installed before the slow part of start-up: the service's imports (its HTTP clients load
        # _ssl, tens of milliseconds after main() begins) had not happened yet. Before the fix the
        # handler came in Service.run_forever, long after them.
        assert not _loaded(proc.pid, "/_ssl."), "SIGHUP handler installed only after the service's imports"
        sent_before_listening = 0
        ready = False
        while time.monotonic() < deadline and not ready:
            listening = _listening(port)
            proc.send_signal(signal.SIGHUP)
            sent_before_listening += not listening
            time.sleep(0.02)
            assert proc.poll() is None, f"killed by SIGHUP: {log_path.read_text()[-2000:]}"
            if listening:
                with contextlib.suppress(requests.RequestException):
                    ready = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        assert ready
        # Signals were sent, and survived, while the port was not open yet.
        assert sent_before_listening >= 1
        deadline = time.monotonic() + 10
        while '"trigger": "signal"' not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert '"config_reloaded"' in log_path.read_text()
        assert '"trigger": "signal"' in log_path.read_text()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        running.http.close()


def _in_thread(fn, seconds: float = 5.0):
    """fn() in a thread; fails (instead of hanging the test) when it blocks."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked on the config path"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "specwatch.yaml"
    os.mkfifo(fifo)
    loads = []
    source = _in_thread(lambda: ConfigSource(str(fifo), loads.append))
    with pytest.raises(ConfigError, match="not a regular file"):
        _in_thread(source.load)
    assert loads == []  # the loader (which would open it blocking) was never called
    assert _in_thread(source.changed) is False


def test_a_config_swapped_for_a_fifo_is_a_failed_reload_and_polling_goes_on(tmp_path):
    with HostileServer() as target:
        target.set(respond(200, b"vllm:num_requests_running 1\n"))
        config = {**FAST, "targets": [{"name": "vllm", "url": target.url, "timeout": "400ms"}]}
        with sidecar_process(tmp_path, config) as running:
            running.wait_for(lambda: "specwatch_config_last_reload_successful 1.0" in running.metrics(), what="loaded")
            fifo = tmp_path / "new.fifo"
            os.mkfifo(fifo)
            os.replace(fifo, tmp_path / "specwatch.yaml")  # what a broken ConfigMap mount could present
            running.wait_for(
                lambda: "specwatch_config_last_reload_successful 0.0" in running.metrics(), what="refused reload"
            )
            polls = target.count
            running.wait_for(lambda: target.count >= polls + 3, what="polling goes on", timeout=10)
            assert running.get("/healthz").status_code == 200
            logs = running.logs()
        assert '"event": "config_reload_failed"' in logs and "not a regular file" in logs


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class _TlsServer:
    """A loopback TLS server with an untrusted self-signed certificate; answers one /metrics each."""

    def __init__(self, cert: Path, key: str | Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            try:
                conn.settimeout(2)
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(4096)
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass  # the client refused the certificate: what the test is about
            finally:
                conn.close()

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_an_untrusted_certificate_is_scrape_error_tls_not_connect(tmp_path):
    cert, key = _self_signed(tmp_path)
    server = _TlsServer(cert, key)
    try:
        scraper = Scraper(f"https://127.0.0.1:{server.port}/metrics", timeout=2.0, max_bytes=1 << 20)
        with pytest.raises(ScrapeError) as caught:
            scraper.fetch()
        scraper.close()
        assert caught.value.reason == "tls"
        assert "certificate" in str(caught.value).lower()
        car = Sidecar(f"https://127.0.0.1:{server.port}/metrics", timeout="2s")
        try:
            car.poll()
            errors = car.errors()
            assert errors["tls"] == 1.0 and errors["connect"] == 0.0, errors
        finally:
            car.close()
    finally:
        server.stop()


def test_https_to_a_plain_http_server_is_tls_and_a_refused_port_stays_connect():
    plain = socket.create_server(("127.0.0.1", 0))
    port = plain.getsockname()[1]

    def answer_in_plain_http():  # whatever the client says first, a plain HTTP answer
        conn, _ = plain.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            time.sleep(0.5)

    thread = threading.Thread(target=answer_in_plain_http, daemon=True)
    thread.start()
    try:
        scraper = Scraper(f"https://127.0.0.1:{port}/metrics", timeout=2.0, max_bytes=1 << 20)
        with pytest.raises(ScrapeError) as caught:
            scraper.fetch()
        scraper.close()
        assert caught.value.reason == "tls", caught.value
    finally:
        thread.join(5)
        plain.close()
    scraper = Scraper(f"https://127.0.0.1:{free_port()}/metrics", timeout=2.0, max_bytes=1 << 20)
    with pytest.raises(ScrapeError) as caught:
        scraper.fetch()
    scraper.close()
    assert caught.value.reason == "connect"
