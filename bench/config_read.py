"""Reading the chart's default config file: config/yamlread.py's fast path against yaml.safe_load.

`python -m bench.config_read [--rounds N]`: the specwatch.yaml the chart's ConfigMap holds with its
default values (rendered by the real Helm engine, helm-python-sdk), read

- per read, in this process: `yamlread.fast_load(text)` and `yaml.safe_load(text)` (what every
  reload costs), CPU time of this thread, in alternation (medians over the rounds);
- once, in a fresh `python -S` process each: `specwatch.config.yamlread.load` of the text, and the
  same after `import yaml` as the plain path does it: the process's CPU time and the modules it
  holds (what the first read at start costs, the import included). Medians over the rounds.

The two reads are checked to give the same object first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from specwatch.config import yamlread

from .common import REPO, cpu_seconds, fmt_us, median

CHART = REPO / "helm" / "specwatch"

_CHILD = r"""
import resource, sys
path, plain = sys.argv[1], sys.argv[2] == "plain"
text = open(path, encoding="utf-8").read()
from specwatch.config import yamlread
if plain:
    import yaml
    value = yaml.safe_load(text)
else:
    value = yamlread.load(text)
assert isinstance(value, dict), value
modules = len(sys.modules)
usage = resource.getrusage(resource.RUSAGE_SELF)
print("CONFIGREAD", modules, usage.ru_utime + usage.ru_stime, flush=True)
"""


def chart_default_config() -> str:
    """specwatch.yaml of the ConfigMap the chart renders with its default values."""
    import helm_python as helm  # a test dependency: the real Helm engine

    subprocess.run([str(CHART / "sync-files")], check=True, timeout=60)
    with helm.Chart.load(str(CHART)) as chart:
        for path, text in chart.render({}, name="demo", namespace="llm").items():
            if path.endswith("configmap.yaml"):
                config: str = yaml.safe_load(text)["data"]["specwatch.yaml"]
                return config
    raise RuntimeError("the chart rendered no ConfigMap")


def per_read(text: str, rounds: int, number: int = 200) -> dict[str, float]:
    """Median CPU seconds of one read, each way, timed in alternation."""
    ways = {"fast path": lambda: yamlread.fast_load(text), "yaml.safe_load": lambda: yaml.safe_load(text)}
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, read in ways.items():
            samples[name].append(cpu_seconds(lambda read=read: [read() for _ in range(number)]) / number)
    return {name: median(values) for name, values in samples.items()}


def fresh_process(path: Path, way: str, rounds: int) -> tuple[int, float]:
    """Modules held and median CPU seconds of a fresh interpreter reading the file `way`."""
    # -S: no site hooks; the packages are found by path (this environment's, where pyyaml is).
    site = str(Path(yaml.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO / "exporter"), site))}
    runs = []
    for _ in range(rounds + 1):  # the first compiles the bytecode
        out = subprocess.run(
            [sys.executable, "-S", "-c", _CHILD, str(path), way], capture_output=True, text=True, env=env, check=True
        ).stdout
        line = next(line for line in out.splitlines() if line.startswith("CONFIGREAD "))
        _, modules, cpu = line.split()
        runs.append((int(modules), float(cpu)))
    return runs[-1][0], median(cpu for _, cpu in runs[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    text = chart_default_config()
    fast = yamlread.fast_load(text)
    if fast is yamlread.DECLINED or fast != yaml.safe_load(text):
        raise SystemExit("the fast path does not read the chart's default config as yaml.safe_load does")
    reads = per_read(text, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "specwatch.yaml"
        path.write_text(text, encoding="utf-8")
        started = {way: fresh_process(path, way, args.rounds) for way in ("fast", "plain")}
    print(f"chart default specwatch.yaml: {len(text)} bytes, {text.count(chr(10))} lines")
    print(f"{'':28}{'fast path':>14}{'yaml.safe_load':>16}")
    print(f"{'per read (CPU)':28}{fmt_us(reads['fast path']):>14}{fmt_us(reads['yaml.safe_load']):>16}")
    print(f"{'fresh process: modules':28}{started['fast'][0]:>14}{started['plain'][0]:>16}")
    cpu = {way: f"{started[way][1] * 1000:.1f} ms" for way in started}
    print(f"{'fresh process: CPU':28}{cpu['fast']:>14}{cpu['plain']:>16}")
    print(
        "RESULT "
        + json.dumps(
            {
                "bytes": len(text),
                "read_fast_s": reads["fast path"],
                "read_yaml_s": reads["yaml.safe_load"],
                "process_modules": {way: started[way][0] for way in started},
                "process_cpu_s": {way: started[way][1] for way in started},
            }
        )
    )


if __name__ == "__main__":
    main()
