"""Loopback HTTP server for a Simulator, with fault injection at the HTTP layer.

`serve()` runs the simulation in wall-clock time × speed and answers like a vLLM API server:
`GET /metrics` (gzip when asked, as prometheus_client does), `GET /version`, `GET /health`.
Faults come from the scenario's `faults:` list (by sim time) or from `handle.inject(kind, ...)`
for tests that need one fault right now.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from specwatch.sim.scenario import FAULT_KINDS, Fault, Scenario, load_scenario
from specwatch.sim.simulator import Simulator

try:  # the content type a 0.0.4 text exposition is served with
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE
except ImportError:  # older prometheus_client
    from prometheus_client.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE

VLLM_VERSION = {"v1": "0.33.0", "v1-legacy-itl": "0.10.1", "v0": "0.7.3"}


class SimServer:
    """Handle returned by serve(): `.url` (…/metrics), `.stop()`, `.sim`, `.sim_time()`,
    `.inject(kind, **params)`, `.clear_faults()`, `.requests` (count of /metrics requests)."""

    def __init__(
        self,
        sim: Simulator,
        host: str,
        port: int,
        speed: float,
        tick: float = 0.05,
        clock: Callable[[], float] | None = None,
    ):
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.sim = sim
        self.speed = float(speed)
        # The simulation's seconds: wall time x speed, or a caller's clock (tests step it by hand, so
        # what the server answers never depends on how fast the machine runs).
        self._clock = clock
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._manual: list[Fault] = []
        self.requests = 0
        self.faults_served: dict[str, int] = {}
        self._t0 = time.monotonic()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        h, p = str(self._httpd.server_address[0]), int(self._httpd.server_address[1])
        self.host, self.port = h, p
        self.url = f"http://{h}:{p}/metrics"
        self._http_thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="specwatch-sim-http", daemon=True
        )
        self._tick = tick
        self._sim_thread = threading.Thread(target=self._run, name="specwatch-sim", daemon=True)
        self._http_thread.start()
        self._sim_thread.start()

    # -- time -------------------------------------------------------------------------------
    def sim_time(self) -> float:
        if self._clock is not None:
            return self._clock()
        return (time.monotonic() - self._t0) * self.speed

    @property
    def done(self) -> bool:
        """True once the scenario's last phase has ended (the server keeps serving its end state)."""
        return self.sim_time() >= self.sim.scenario.duration

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            with self.lock:
                self.sim.advance_to(self.sim_time())

    def snapshot(self) -> tuple[str, dict[str, Any], list[Fault]]:
        """(exposition, truth, active faults) at the current sim time, consistently."""
        with self.lock:
            t = self.sim_time()
            self.sim.advance_to(t)
            faults = list(self._manual) + self.sim.scenario.faults_at(self.sim.now)
            return self.sim.render(), self.sim.truth(), faults

    def truth(self) -> dict[str, Any]:
        return self.snapshot()[1]

    # -- faults -----------------------------------------------------------------------------
    def inject(self, kind: str, **params: Any) -> None:
        """Apply a fault to every /metrics request until clear_faults()."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (one of {', '.join(FAULT_KINDS)})")
        with self.lock:
            self._manual = [Fault(at=0.0, duration=float("inf"), kind=kind, params=params)]

    def clear_faults(self) -> None:
        with self.lock:
            self._manual = []

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._http_thread.join(timeout=5)
        self._sim_thread.join(timeout=5)

    def __enter__(self) -> SimServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: SimServer

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: tuple[str, int] | str
    ) -> None:
        # A client that hangs up mid-response (a timed-out poll, a fault test) is normal here.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like uvicorn
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and the demo own the terminal
        pass

    @property
    def owner(self) -> SimServer:
        server = self.server
        assert isinstance(server, _Server)
        return server.owner

    def do_GET(self) -> None:
        owner = self.owner
        path = self.path.split("?", 1)[0]
        if path == "/version":
            return self._send(200, json.dumps({"version": VLLM_VERSION[owner.sim.schema]}).encode(), "application/json")
        if path == "/health":
            return self._send(200, b"", "application/json")
        if path != "/metrics":
            return self._send(404, b'{"detail":"Not Found"}', "application/json")
        text, _truth, faults = owner.snapshot()
        owner.requests += 1
        if faults:
            f = faults[0]
            owner.faults_served[f.kind] = owner.faults_served.get(f.kind, 0) + 1
            return self._fault(f, text)
        body = text.encode()
        if "gzip" in (self.headers.get("Accept-Encoding") or ""):
            return self._send(200, gzip.compress(body, 6), CONTENT_TYPE, {"Content-Encoding": "gzip"})
        return self._send(200, body, CONTENT_TYPE)

    def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _fault(self, f: Fault, text: str) -> None:
        p = f.params
        owner = self.owner
        if f.kind == "http_500":
            return self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
        if f.kind == "empty":
            return self._send(200, b"", CONTENT_TYPE)
        if f.kind == "drop":
            # Read the request, then hang up without a status line.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if f.kind == "truncated":
            body = text.encode()
            cut = int(len(body) * float(p.get("fraction", 0.5)))
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))  # promises more than is sent
            self.end_headers()
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if f.kind == "garbage":
            rnd = random.Random(owner.requests)
            body = bytes(rnd.getrandbits(8) for _ in range(int(p.get("bytes", 4096))))
            body = b"<html><body>502 Bad Gateway</body></html>\n\x00" + body + b"\n{} 1\n# TYPE x\n"
            return self._send(200, body, CONTENT_TYPE)
        if f.kind == "slow_drip":
            body = text.encode()
            chunk = max(1, int(p.get("chunk", 16)))
            interval = float(p.get("interval", 0.5))
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(0, len(body), chunk):
                    if owner._stop.wait(interval):
                        break
                    self.wfile.write(body[i : i + chunk])
                    self.wfile.flush()
            except OSError:  # the client gave up: that is the point of the fault
                pass
            self.close_connection = True
            return None
        if f.kind == "oversized":
            body = text.encode()
            target = int(p.get("bytes", 32 * 1024 * 1024))
            pad_line = b"# padding " + b"x" * 1013 + b"\n"  # 1 KiB comment lines
            n_pad = max(0, -(-(target - len(body)) // len(pad_line)))  # at least `bytes` in total
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body) + n_pad * len(pad_line)))
            self.end_headers()
            try:
                self.wfile.write(body)
                block = pad_line * 64
                left = n_pad
                while left > 0 and not owner._stop.is_set():
                    k = min(64, left)
                    self.wfile.write(block if k == 64 else pad_line * k)
                    left -= k
            except OSError:  # the client stopped reading at its byte cap
                pass
            self.close_connection = True
            return None
        if f.kind == "huge_labels":
            n = int(p.get("labels", 10000))
            labels = ",".join(f'l{i:05d}="v{i}"' for i in range(n))
            extra = (
                f"# HELP vllm:sim_huge_label_set A series with {n} labels.\n"
                f"# TYPE vllm:sim_huge_label_set gauge\nvllm:sim_huge_label_set{{{labels}}} 1.0\n"
            )
            return self._send(200, (text + extra).encode(), CONTENT_TYPE)
        return self._send(500, b"unknown fault", "text/plain")


def serve(
    scenario: Scenario | str,
    host: str = "127.0.0.1",
    port: int = 0,
    speed: float = 1.0,
    seed: int = 0,
    clock: Callable[[], float] | None = None,
) -> SimServer:
    """Start the simulated vLLM on (host, port) (port 0 = a free port); returns the handle. With
    `clock`, simulated time is what it returns instead of wall time x speed."""
    sc = load_scenario(scenario)
    sim = Simulator(sc, seed=seed, epoch=time.time())
    return SimServer(sim, host, port, speed, clock=clock)
