"""Start-up cost of the CLI: modules imported and CPU time, per command.

`python -m bench.startup [--repeats N]`: each case runs in a fresh `python -S -X importtime`
process (from bytecode: one warm-up run first) that calls `specwatch.cli.main.main` as the
`specwatch` script does, and reports how many modules `sys.modules` holds, the process's CPU
time and its peak RSS (VmHWM of /proc/self/status, else getrusage's ru_maxrss). Only what the image installs can be imported there: the runtime dependencies of
pyproject.toml (RUNTIME, copied from this environment into a temporary directory) and the
package. A development environment has more (rich, which import-linter brings, is imported by
structlog whenever it is installed); `--environment dev` measures with everything installed here.

- `specwatch --help` and `specwatch run --help`: until the help is printed;
- `specwatch run`: a real sidecar (one target on a closed loopback port, listen on port 0), counted
  once it has imported nothing for RUN_SECONDS (what it imports on its first polls is included),
  configured by a file (a poll every second), and by flags alone (the default interval).

The running sidecar's count is judged against GOAL_MODULES (PASS / MISS): a test of it would
depend on the Python and the packages installed, so it is measured here, not asserted.

Also: the `-X importtime` lines of each case (one per module imported), and importing
prometheus_client alone, for scale. Medians over the repeats.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import REPO, median

RUN_SECONDS = 3.0
#: At most this many modules for `specwatch run` once polling (docs/benchmarks.md, Summary).
GOAL_MODULES = 200
#: The importable packages of pyproject.toml's runtime dependencies (certifi, prometheus-client,
#: pyyaml, structlog): all that the image has besides the standard library and specwatch.
RUNTIME = ("certifi", "prometheus_client", "yaml", "_yaml", "structlog")
#: Top-level module names counted as the runtime dependencies' (pyyaml's C extension also brings
#: Cython's runtime modules, cython_runtime and _cython_<version>).
DEPENDENCY_MODULES = (*RUNTIME, "cython_runtime")


def runtime_site(into: Path) -> Path:
    """A directory holding only RUNTIME's packages (copies of this environment's)."""
    for name in RUNTIME:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"{name} is not installed here")
        source = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    return into


_CHILD = r"""
import os, sys, threading, time
def report():
    names = list(sys.modules)  # counted before the report's own imports
    modules = len(names)
    own = sum(1 for name in names if name.partition(".")[0] == "specwatch")
    dependencies = sum(1 for name in names if name.partition(".")[0] in DEPENDENCIES or name.startswith("_cython_"))
    import json, resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss / 1024  # MiB (Linux counts kB); the kernel's VmHWM where /proc has it
    try:
        with open("/proc/self/status") as status:
            peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        pass
    out = {"modules": modules, "own": own, "dependencies": dependencies, "stdlib": modules - own - dependencies,
           "cpu": usage.ru_utime + usage.ru_stime, "rss": peak}
    print("STARTUP " + json.dumps(out), flush=True)
DEPENDENCIES = set(os.environ["STARTUP_DEPENDENCIES"].split(","))
case, argv, wait = sys.argv[1], sys.argv[2:], float(os.environ["STARTUP_WAIT"])
if case == "import":
    __import__(argv[0])
    report()
    sys.exit(0)
if wait > 0:
    # Counted once no module has been imported for `wait` seconds of wall time: a fixed time from
    # the start would count a loaded machine's run before its imports were done.
    def settle():
        seen, since = len(sys.modules), time.monotonic()
        while time.monotonic() - since < wait:
            time.sleep(0.05)
            if len(sys.modules) != seen:
                seen, since = len(sys.modules), time.monotonic()
        report()
        os._exit(0)
    threading.Thread(target=settle).start()
from specwatch.cli.main import main
try:
    main(argv)
except SystemExit:
    pass
if wait <= 0:
    report()
"""

CONFIG = """targets:
  - name: vllm
    url: http://127.0.0.1:9/metrics
listen: 127.0.0.1:0
poll_interval: 1s
log:
  level: error
"""
#: The same sidecar configured by flags alone (no config file to read).
FLAGS_ONLY = ["run", "--target", "http://127.0.0.1:9/metrics", "--listen", "127.0.0.1:0"]


def _once(case: str, argv: list[str], wait: float, site: Path | None) -> dict[str, float]:
    path = f"{site}:{REPO / 'exporter'}" if site is not None else str(REPO / "exporter")
    env = {
        "PYTHONPATH": path,
        "STARTUP_WAIT": str(wait),
        "STARTUP_DEPENDENCIES": ",".join(DEPENDENCY_MODULES),
        "PATH": "/usr/bin:/bin",
    }
    isolated = ["-S"] if site is not None else []
    proc = subprocess.run(
        [sys.executable, *isolated, "-X", "importtime", "-c", _CHILD, case, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("STARTUP "))
    out = json.loads(line.removeprefix("STARTUP "))
    out["importtime_lines"] = sum(1 for x in proc.stderr.splitlines() if x.startswith("import time:")) - 1
    return out


def measure(repeats: int = 3, environment: str = "image") -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "specwatch.yaml"
        config.write_text(CONFIG)
        site = runtime_site(Path(tmp) / "site") if environment == "image" else None
        cases = {
            "import prometheus_client": ("import", ["prometheus_client"], 0.0),
            "specwatch --help": ("cli", ["--help"], 0.0),
            "specwatch run --help": ("cli", ["run", "--help"], 0.0),
            "specwatch run, polling": ("cli", ["run", "--config", str(config)], RUN_SECONDS),
            "specwatch run, polling, flags only": ("cli", FLAGS_ONLY, RUN_SECONDS),
        }
        results: dict[str, dict[str, float]] = {}
        for name, (case, argv, wait) in cases.items():
            _once(case, argv, wait, site)  # writes the bytecode
            runs = [_once(case, argv, wait, site) for _ in range(repeats)]
            results[name] = {key: median(r[key] for r in runs) for key in runs[0]}
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--environment", choices=("image", "dev"), default="image")
    args = parser.parse_args()
    for name, result in measure(args.repeats, args.environment).items():
        verdict = ""
        if name.startswith("specwatch run") and "--help" not in name:
            verdict = f"  {'PASS' if result['modules'] < GOAL_MODULES else 'MISS'} (< {GOAL_MODULES})"
        print(
            f"{name:40s} {result['modules']:5.0f} modules (own {result['own']:.0f}, dependencies "
            f"{result['dependencies']:.0f}, standard library {result['stdlib']:.0f})  "
            f"{result['importtime_lines']:5.0f} imported  "
            f"{result['cpu']:6.3f} s CPU  {result['rss']:5.1f} MiB peak RSS{verdict}"
        )


if __name__ == "__main__":
    main()
