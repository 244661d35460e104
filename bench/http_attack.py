"""(8) The HTTP front under a hostile pod neighbour: a legitimate scraper's success and the server's
peak RSS while a few clients try to exhaust or own it.

Attacks (all from one process, one thread, loopback only, bounded in count and time):
- fat-header: a request whose 98 header lines are 65,000 bytes each (each under http.server's
  per-line and 100-header limits), then one more header dripped a byte every 2 s, never finished;
  the client reconnects 0.1 s after the server closes it;
- slowloris: a request line, then one byte of a header per second, never finished; reconnects
  0.1 s after the server closes it;
- keep-alive: a well-behaved client holding its connection, one GET /metrics every 2 s (reading
  every answer); reconnects when the server closes it.

While an attack runs, this process probes like a kubelet or a Prometheus that just restarted: a
fresh connection per probe, GET /metrics and /healthz alternately every 0.25 s, a success being
the whole 200 answer within 2 s.

Servers, each in its own process, one after the other in the same run: the real `specwatch run`
(the event-loop front), the front it replaced (a copy of the 64-slot ThreadingHTTPServer with a 5 s
per-recv timeout, bench/servers.py `legacy`) and prometheus_client's own `start_http_server`
(a thread per connection, no cap), the last two serving the same collector.

    python -m bench.http_attack attack PORT FAT SLOWLORIS KEEPALIVE SECONDS   # the attacker alone
"""

from __future__ import annotations

import contextlib
import errno
import json
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FAT_LINES = 98
FAT_LINE_BYTES = 65_000
FAT_DRIP = 2.0  # seconds between the bytes of the fat client's last, never-finished header
SLOW_DRIP = 1.0  # seconds between a slowloris's bytes
KEEPALIVE_INTERVAL = 2.0
RECONNECT_PAUSE = 0.1
MAX_SECONDS = 120.0  # no attack runs longer than this, whatever it is asked


@dataclass
class _Client:
    kind: str
    sock: socket.socket | None = None
    pending: list[memoryview] = field(default_factory=list)
    next_at: float = 0.0  # when to drip / request / reconnect next
    connected: bool = False
    received: int = 0


class Attack:
    """Every attacking client in one selector loop; run() returns its counters."""

    def __init__(self, port: int, *, fat: int, slowloris: int, keepalive: int, host: str = "127.0.0.1"):
        assert host in ("127.0.0.1", "::1", "localhost"), "loopback only"
        self.host, self.port = host, port
        self.clients = (
            [_Client("fat") for _ in range(fat)]
            + [_Client("slowloris") for _ in range(slowloris)]
            + [_Client("keepalive") for _ in range(keepalive)]
        )
        self.selector = selectors.DefaultSelector()
        self.stats = dict.fromkeys(
            ("connects", "closed_by_server", "connect_errors", "bytes_sent", "responses", "refused_431"), 0
        )
        line = b"X-Fat-%02d: " + b"a" * FAT_LINE_BYTES + b"\r\n"
        self._fat_head = [memoryview(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")] + [
            memoryview(line % i) for i in range(FAT_LINES)
        ]
        self._fat_head.append(memoryview(b"X-Slow: "))

    def _connect(self, client: _Client, now: float) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex((self.host, self.port))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.stats["connect_errors"] += 1
            client.next_at = now + RECONNECT_PAUSE
            return
        client.sock, client.connected, client.received = sock, False, 0
        if client.kind == "fat":
            client.pending = list(self._fat_head)
        elif client.kind == "slowloris":
            client.pending = [memoryview(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")]
        else:
            client.pending = [memoryview(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")]
        client.next_at = now + (FAT_DRIP if client.kind == "fat" else SLOW_DRIP)
        if client.kind == "keepalive":
            client.next_at = now + KEEPALIVE_INTERVAL
        self.selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)
        self.stats["connects"] += 1

    def _drop(self, client: _Client, now: float, *, by_server: bool) -> None:
        if client.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(client.sock)
            client.sock.close()
        client.sock, client.pending = None, []
        if by_server:
            self.stats["closed_by_server"] += 1
        client.next_at = now + RECONNECT_PAUSE

    def _send(self, client: _Client, now: float) -> None:
        assert client.sock is not None
        while client.pending:
            try:
                sent = client.sock.send(client.pending[0])
            except (BlockingIOError, InterruptedError):
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self.selector.modify(client.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)
                return
            except OSError:
                self._drop(client, now, by_server=True)
                return
            client.connected = True
            self.stats["bytes_sent"] += sent
            if sent >= len(client.pending[0]):
                client.pending.pop(0)
            else:
                client.pending[0] = client.pending[0][sent:]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.modify(client.sock, selectors.EVENT_READ, client)

    def _recv(self, client: _Client, now: float) -> None:
        assert client.sock is not None
        try:
            data = client.sock.recv(262_144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client, now, by_server=True)
            return
        if not data:
            self._drop(client, now, by_server=True)
            return
        self.stats["responses"] += data.count(b"HTTP/1.")
        self.stats["refused_431"] += data.count(b" 431 ")

    def _tick(self, client: _Client, now: float) -> None:
        if client.sock is None:
            self._connect(client, now)
            return
        if client.pending:
            return  # still sending the head: the drip waits
        if client.kind == "keepalive":
            client.pending = [memoryview(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")]
            client.next_at = now + KEEPALIVE_INTERVAL
        else:
            client.pending = [memoryview(b"a")]  # one more byte of a header that never ends
            client.next_at = now + (FAT_DRIP if client.kind == "fat" else SLOW_DRIP)
        self._send(client, now)

    def run(self, seconds: float) -> dict[str, int]:
        end = time.monotonic() + min(seconds, MAX_SECONDS)
        now = time.monotonic()
        for i, client in enumerate(self.clients):  # connect at spread phases over the first 0.5 s
            client.next_at = now + 0.5 * i / max(len(self.clients), 1)
        try:
            while (now := time.monotonic()) < end:
                for key, mask in self.selector.select(0.05):
                    client = key.data
                    if client.sock is None or key.fileobj is not client.sock:
                        continue
                    if mask & selectors.EVENT_WRITE:
                        self._send(client, now)
                    if client.sock is not None and mask & selectors.EVENT_READ:
                        self._recv(client, now)
                for client in self.clients:
                    if now >= client.next_at:
                        self._tick(client, now)
        finally:
            for client in self.clients:
                if client.sock is not None:
                    client.sock.close()
            self.selector.close()
        return self.stats


def probe(host: str, port: int, path: str, deadline: float = 2.0) -> float | None:
    """One probe on a fresh connection: seconds to the whole 200 answer, or None (failed or late)."""
    start = time.monotonic()
    limit = start + deadline
    try:
        with socket.create_connection((host, port), timeout=deadline) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                left = limit - time.monotonic()
                if left <= 0:
                    return None
                sock.settimeout(left)
                chunk = sock.recv(262_144)
                if not chunk:
                    break
                data += chunk
                head, sep, body = data.partition(b"\r\n\r\n")
                if sep:
                    length = next(
                        (
                            int(v)
                            for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                            if k.lower() == b"content-length"
                        ),
                        None,
                    )
                    if length is not None and len(body) >= length:
                        break
    except OSError:
        return None
    if not data.startswith(b"HTTP/1.1 200") and not data.startswith(b"HTTP/1.0 200"):
        return None
    took = time.monotonic() - start
    return took if took <= deadline else None


def probe_for(
    host: str, port: int, seconds: float, paths: tuple[str, ...] = ("/metrics", "/healthz"), interval: float = 0.25
) -> dict[str, list[float | None]]:
    """Probe the paths in turn every `interval` for `seconds`: {path: [seconds or None per probe]}."""
    out: dict[str, list[float | None]] = {p: [] for p in paths}
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        started = time.monotonic()
        path = paths[i % len(paths)]
        out[path].append(probe(host, port, path))
        i += 1
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    return out


def attack_process(port: int, fat: int, slowloris: int, keepalive: int, seconds: float) -> subprocess.Popen[str]:
    """The attacker in its own process (its Python loop must not share the server's GIL)."""
    repo = Path(__file__).resolve().parents[1]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.http_attack",
            "attack",
            str(port),
            str(fat),
            str(slowloris),
            str(keepalive),
            str(seconds),
        ],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )


def attack_result(proc: subprocess.Popen[str], timeout: float) -> dict[str, int]:
    out, _ = proc.communicate(timeout=timeout)
    return json.loads(out)


class RssSampler:
    """Peak resident memory of a process, sampled every 0.1 s (VmHWM at the end too)."""

    def __init__(self, pid: int):
        self.pid, self.peak_kib = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self, field_name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(OSError):
                self.peak_kib = max(self.peak_kib, self._read("VmRSS"))

    def __enter__(self) -> RssSampler:
        self.before_kib = self._read("VmRSS")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self.peak_kib = max(self.peak_kib, self._read("VmRSS"))


SCENARIOS = (
    ("16 fat-header + 200 slowloris", 16, 200, 0),
    ("64 keep-alive + 64 slowloris", 0, 64, 64),
)
LIMIT_MIB = 128  # the chart's memory limit for the sidecar container


def _start_server(name: str, rec: Path, port: int, vport: int, log: Path) -> subprocess.Popen[bytes]:
    import yaml

    from .common import REPO, cache_dir
    from .replay_proc import replay_config

    out = open(log, "w")  # noqa: SIM115 - the subprocess's output, closed when it is stopped
    if name == "specwatch":
        cfg = yaml.safe_load(replay_config().read_text())
        cfg.update(
            {
                "listen": f"127.0.0.1:{port}",
                "poll_interval": "1s",
                "targets": [{"name": "vllm", "url": f"http://127.0.0.1:{vport}/metrics", "timeout": "900ms"}],
            }
        )
        cfg_path = cache_dir() / "attack-sidecar.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        # This tree's specwatch (PYTHONPATH), not whatever console script the environment installed.
        code = "import sys; from specwatch.cli.main import main; sys.exit(main())"
        cmd = [sys.executable, "-c", code, "run", "--config", str(cfg_path)]
    else:
        cmd = [sys.executable, "-m", "bench.servers", name, str(rec), str(port), "72"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc


def _share(results: list[float | None]) -> float:
    return sum(r is not None for r in results) / len(results) if results else float("nan")


def run_attack(smoke: bool) -> tuple[object, dict]:
    from . import payloads
    from .common import REPO, Table, cache_dir, fmt_us, free_port, percentile, stop_process, verdict_mark, wait_http

    seconds = 3.0 if smoke else 25.0
    # Smoke: the first attack against specwatch and the front it replaced only (CI: every table, quickly).
    scenarios = SCENARIOS[:1] if smoke else SCENARIOS
    servers = ("specwatch", "legacy") if smoke else ("specwatch", "legacy", "peer")
    rec = payloads.tiled_recording(720 if smoke else 17_280)
    vport = free_port()
    vlog = open(cache_dir() / "attack-payloads.log", "w")  # noqa: SIM115 - closed in the finally
    vllm = subprocess.Popen(
        [sys.executable, "-m", "bench.servers", "payloads", str(rec), str(vport)], cwd=REPO, stdout=vlog, stderr=vlog
    )
    rows: dict[tuple[str, str], dict] = {}
    try:
        for scenario, fat, slow, keep in scenarios:
            for name in servers:
                port = free_port()
                server = _start_server(name, rec, port, vport, cache_dir() / f"attack-{name}.log")
                try:
                    ready = "/readyz" if name == "specwatch" else "/metrics"
                    wait_http(f"http://127.0.0.1:{port}{ready}", 120, server)
                    paths = ("/metrics", "/healthz") if name != "peer" else ("/metrics",)
                    calm = probe_for("127.0.0.1", port, 2.0, paths)
                    with RssSampler(server.pid) as rss:
                        attacker = attack_process(port, fat, slow, keep, seconds + 1.0)
                        time.sleep(1.0)  # the attack's ramp: every client connected
                        probes = probe_for("127.0.0.1", port, seconds - 1.0, paths)
                        stats = attack_result(attacker, timeout=seconds + 60)
                    alive = server.poll() is None
                finally:
                    stop_process(server)
                rows[(scenario, name)] = {
                    "calm_metrics_ok": _share(calm["/metrics"]),
                    "metrics_ok": _share(probes["/metrics"]),
                    "metrics_probes": len(probes["/metrics"]),
                    "healthz_ok": _share(probes["/healthz"]) if "/healthz" in probes else None,
                    "healthz_probes": len(probes.get("/healthz", [])),
                    "latencies": sorted(x for v in probes.values() for x in v if x is not None),
                    "rss_before_mib": rss.before_kib / 1024,
                    "peak_rss_mib": rss.peak_kib / 1024,
                    "alive": alive,
                    "attacker": stats,
                }
                print(f"   {scenario} / {name}: {rows[(scenario, name)]['metrics_ok']:.0%} ok", file=sys.stderr)
    finally:
        stop_process(vllm)
        vlog.close()
    table = Table(
        "attack",
        "The HTTP front under hostile pod neighbours (specwatch's event loop vs the front it replaced and "
        "prometheus_client's start_http_server, same collector, one run)",
        [
            "attack",
            "server",
            "/metrics ok",
            "/healthz ok",
            "probe p50 / p99 (answered)",
            "RSS before",
            "peak RSS",
            "peak RSS vs legacy",
            "attacker connects",
            "goal",
            "met",
        ],
        note=f"{seconds:g} s per attack and server, each server a fresh process (nothing left over from the "
        "last attack); the attacker is one process on loopback (bench/http_attack.py). Fat-header: "
        f"{FAT_LINES} header lines of {FAT_LINE_BYTES:,} bytes, then one byte every {FAT_DRIP:g} s of a header "
        f"that never ends; slowloris: a request line, then a byte every {SLOW_DRIP:g} s; keep-alive: "
        f"GET /metrics every {KEEPALIVE_INTERVAL:g} s on a held connection; every attacker reconnects "
        f"{RECONNECT_PAUSE:g} s after the server closes it. Probes: a fresh connection each, /metrics and "
        "/healthz alternately every 0.25 s from 1 s into the attack (the peer has no /healthz), a success "
        "being the whole 200 answer within 2 s. RSS is sampled every 0.1 s. legacy: a copy of the "
        "pre-event-loop front (bench/servers.py legacy: 64 slots, a thread each, 5 s per-recv timeout).",
    )
    out: dict = {"seconds": seconds, "rows": {}}
    for scenario, *_ in scenarios:
        legacy_peak = rows[(scenario, "legacy")]["peak_rss_mib"]
        for name in servers:
            r = rows[(scenario, name)]
            goal_row = name == "specwatch"
            met = (r["metrics_ok"] >= 0.95 and r["peak_rss_mib"] < LIMIT_MIB and r["alive"]) if goal_row else None
            lat = r["latencies"]
            table.add(
                scenario,
                name,
                f"{r['metrics_ok']:.0%} of {r['metrics_probes']}",
                "—" if r["healthz_ok"] is None else f"{r['healthz_ok']:.0%} of {r['healthz_probes']}",
                f"{fmt_us(percentile(lat, 50))} / {fmt_us(percentile(lat, 99))}" if lat else "n/a",
                f"{r['rss_before_mib']:.1f} MiB",
                f"{r['peak_rss_mib']:.1f} MiB" + ("" if r["alive"] else " (died)"),
                f"{r['peak_rss_mib'] / legacy_peak:.2f}×",
                str(r["attacker"]["connects"]),
                f"/metrics ≥ 95 %, peak RSS < {LIMIT_MIB} MiB" if goal_row else "—",
                verdict_mark(met),
            )
            out["rows"][f"{scenario} / {name}"] = {**{k: v for k, v in r.items() if k != "latencies"}, "met": met}
    return table, out


if __name__ == "__main__" and sys.argv[1:2] == ["attack"]:
    port_, fat_, slow_, keep_, seconds_ = sys.argv[2:7]
    result = Attack(int(port_), fat=int(fat_), slowloris=int(slow_), keepalive=int(keep_)).run(float(seconds_))
    print(json.dumps(result))
