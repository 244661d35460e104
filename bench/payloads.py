"""Where the benchmark payloads come from.

* real vLLM payloads: the project's own fixtures (vLLM 0.32 on CPU, ngram K=4, incl. a restart);
* simulator payload sequences with N data-parallel engines (specwatch.sim, exact vLLM names);
* recordings of the shipped scenarios (sim.record, cached);
* a 24 h recording (17,280 polls) built by tiling a simulated 10-minute steady run: the counters of
  tile c are the simulated ones plus c times the increase over one tile, so every window's deltas
  are real simulated (noisy) traffic and every counter stays monotonic;
* synthetic scaling payloads: a simulator payload whose vLLM series are copied per route x engine,
  or padded with unrelated families to a given size.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from specwatch import sim

from .common import FIXTURES, cache_dir

POLL = 5.0
REAL_DIR = FIXTURES / "vllm-cpu-real"


def _sim_fingerprint() -> str:
    """Cached recordings are invalidated when the simulator's code or scenarios change."""
    h = hashlib.sha256()
    root = Path(sim.__file__).parent
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".yaml"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def real_payloads() -> list[tuple[str, float, str]]:
    """(file name, unix time, text) of the real vLLM fixture sequence, in scrape order."""
    if not REAL_DIR.is_dir():
        return []
    times = {}
    timeline = REAL_DIR / "timeline.jsonl"
    if timeline.exists():
        for line in timeline.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                times[entry["file"]] = float(entry["unix_time"])
    out = []
    for i, p in enumerate(sorted(REAL_DIR.glob("*.prom"))):
        out.append((p.name, times.get(p.name, 1_795_952_400.0 + 2.0 * i), p.read_text()))
    return out


def dp_scenario_yaml(
    engines: int, concurrency_per_engine: int = 16, duration: float = 600.0, acceptance_rate: float = 0.6
) -> str:
    return f"""name: bench-dp{engines}
description: benchmark payloads, Llama-3.1-8B EAGLE-3 K=4 on {engines} data-parallel engine(s)
hardware: h100-sxm
model: llama-3.1-8b
method: eagle3
num_speculative_tokens: 4
engines: {engines}
prompt_tokens: 1536
output_tokens: 1024
routes:
  - model_name: llama-8b
phases:
  - {{name: steady, duration: {duration:g}s, concurrency: {concurrency_per_engine * engines}, acceptance_rate: {acceptance_rate}}}
expected:
  crossings: []
"""


def _scenario_file(name: str, text: str) -> Path:
    path = cache_dir() / f"{name}.yaml"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def sim_sequence(engines: int, polls: int, seed: int = 0) -> list[tuple[float, str]]:
    """`polls` consecutive simulator payloads (every 5 s of sim time, from t = 5 s) with N DP engines."""
    key = f"dp{engines}-{polls}-{seed}-{_sim_fingerprint()}"
    path = cache_dir() / f"seq-{key}.jsonl"
    if not path.exists():
        scen = _scenario_file(f"bench-dp{engines}", dp_scenario_yaml(engines, duration=POLL * (polls + 1)))
        s = sim.Simulator(str(scen), seed=seed)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            for i in range(1, polls + 1):
                s.advance_to(POLL * i)
                fh.write(json.dumps({"t": s.epoch + POLL * i, "text": s.render()}) + "\n")
        tmp.replace(path)
    return [(e["t"], e["text"]) for e in map(json.loads, path.read_text().splitlines())]


def scenario_recording(name: str, seed: int = 0, duration: float | None = None) -> Path:
    """A cached sim.record() recording of a shipped scenario (5 s polls)."""
    tag = f"{name}-s{seed}-d{duration or 'full'}-{_sim_fingerprint()}"
    path = cache_dir() / f"rec-{tag}.jsonl"
    if not path.exists():
        sim.record(name, path, poll_interval=POLL, seed=seed, duration=duration)
    return path


# ---- 24 h recording by tiling --------------------------------------------------------------------

_VALUE = re.compile(r"^(.*[ }])(\S+)$")


def _cumulative_families(text: str) -> set[str]:
    """Sample names whose values are cumulative (counters, histogram parts), excluding _created."""
    names = set()
    for line in text.split("\n"):
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) == 4 and parts[3] in ("counter", "histogram", "summary"):
                base = parts[2]
                if parts[3] == "counter":
                    root = base[:-6] if base.endswith("_total") else base
                    names.add(root + "_total")
                else:
                    names.update({base + "_bucket", base + "_sum", base + "_count", base})
    return names


def tiled_recording(
    polls: int, *, scenario: str = "steady", tile_seconds: float = 600.0, seed: int = 0, target: str = "vllm"
) -> Path:
    """A recording of `polls` polls (5 s apart) built from one simulated tile of `tile_seconds`."""
    tag = f"{scenario}-tile{tile_seconds:g}-n{polls}-s{seed}-{_sim_fingerprint()}"
    path = cache_dir() / f"rec24-{tag}.jsonl"
    if path.exists():
        return path
    s = sim.Simulator(scenario, seed=seed)
    per_tile = round(tile_seconds / POLL)
    base = []
    for j in range(per_tile + 1):
        s.advance_to(POLL * j)
        base.append(s.render())
    cumulative = _cumulative_families(base[0])
    # Per poll of the tile: list of (constant text, value or None, series key)
    templates = []
    for text in base:
        parts = []
        for line in text.split("\n"):
            if line and line[0] != "#":
                name = line.split("{", 1)[0].split(" ", 1)[0]
                if name in cumulative:
                    m = _VALUE.match(line)
                    if m:
                        parts.append((m.group(1), float(m.group(2)), m.group(1)))
                        continue
            parts.append((line, None, None))
        templates.append(parts)
    last = {key: v for _, v, key in templates[-1] if key is not None}
    first = {key: v for _, v, key in templates[0] if key is not None}
    increase = {key: last[key] - first.get(key, 0.0) for key in last}
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        for i in range(polls):
            c, j = divmod(i, per_tile)
            lines = []
            for const, value, key in templates[j]:
                if value is None:
                    lines.append(const)
                else:
                    lines.append(const + repr(value + c * increase.get(key, 0.0)))
            fh.write(json.dumps({"t": round(s.epoch + POLL * i, 6), "target": target, "text": "\n".join(lines)}))
            fh.write("\n")
    tmp.replace(path)
    return path


# ---- scaling payloads ----------------------------------------------------------------------------


def replicate(text: str, routes: int, engines: int) -> str:
    """Copy every vllm: sample line per route (model_name suffixed -r) and engine (engine="e")."""
    model = re.search(r'model_name="([^"]*)"', text).group(1)
    out = []
    for line in text.split("\n"):
        if not line.startswith("vllm:"):
            out.append(line)
            continue
        for r in range(routes):
            l1 = line if r == 0 else line.replace(f'model_name="{model}"', f'model_name="{model}-{r}"')
            for e in range(engines):
                out.append(l1 if e == 0 else l1.replace('engine="0"', f'engine="{e}"'))
    return "\n".join(out)


def pad(text: str, target_bytes: int) -> str:
    """Append unrelated series (as other exporters in the same process would) up to size."""
    if len(text) >= target_bytes:
        return text
    extra = [
        "# HELP bench_padding_requests Unrelated series of the same process.",
        "# TYPE bench_padding_requests gauge",
    ]
    size = len(text) + sum(len(x) + 1 for x in extra)
    i = 0
    while size < target_bytes:
        line = (
            f'bench_padding_requests{{handler="/v1/endpoint/{i // 20}",method="POST",code="{200 + i % 20}"}} {i * 3}.0'
        )
        extra.append(line)
        size += len(line) + 1
        i += 1
    body = text if text.endswith("\n") else text + "\n"
    return body + "\n".join(extra) + "\n"
