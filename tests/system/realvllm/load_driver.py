"""Bounded load against a vLLM OpenAI server on loopback.

Phases run one after another; in each, `concurrency` client threads send
streaming /v1/completions requests until the phase's time or request budget is
spent (then in-flight requests finish, each bounded by a timeout).  Requests
are deterministic from a seed, so the spec and no-spec servers get the same
sequence of prompts and lengths:

* n-gram friendly prompts (repeated sentences, code, SQL): prompt lookup can
  match them, and a random model at temperature 0 tends to loop, which n-gram
  lookup then predicts;
* n-gram unfriendly prompts (random word salad).

`ignore_eos` makes every request generate exactly `max_tokens` tokens.

Latency, client side:
* per-token latency of a request (TPOT) = (last chunk time - first chunk time) / (tokens - 1
  after the first chunk); P50/P99 over the phase's requests;
* inter-chunk gaps (what a streaming user sees between updates; with speculation one chunk
  carries several tokens, whose count comes from `return_token_ids`), and the same gaps split
  evenly over the chunk's tokens.  On a 2-core box the API server, this client and the engine
  share CPUs, so chunks often arrive in bursts: the P50 of gaps is then near 0 and only the
  tail is informative.

usage: python load_driver.py --base http://127.0.0.1:PORT --phases 1:15:400,4:15:800 --out result.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time

import requests

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
    "river",
    "stone",
    "cloud",
    "lantern",
    "copper",
    "violet",
    "meadow",
    "harbor",
    "signal",
    "engine",
    "kernel",
    "socket",
    "buffer",
    "thread",
    "queue",
    "vector",
    "matrix",
    "tensor",
    "closure",
    "module",
    "import",
    "orange",
    "falcon",
]

FRIENDLY = [
    "the cat sat on the mat. " * 8,
    "def add(a, b):\n    return a + b\n\n" * 5,
    "for i in range(10):\n    print(i)\n" * 6,
    "GNU GENERAL PUBLIC LICENSE Version 3. " * 6,
    "SELECT id, name FROM users WHERE id = 1;\n" * 6,
    "one two three four five six seven eight nine ten " * 5,
]


def make_request(seed: int, friendly_share: float, min_tokens: int, max_tokens: int) -> dict:
    rng = random.Random(seed)
    if rng.random() < friendly_share:
        kind, prompt = "ngram_friendly", rng.choice(FRIENDLY)
    else:
        kind, prompt = "ngram_unfriendly", " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
    return {"kind": kind, "prompt": prompt, "max_tokens": rng.randint(min_tokens, max_tokens)}


def quantile(xs: list[float], q: float) -> float | None:
    """Linear-interpolated sample quantile (numpy's default)."""
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def one_request(base: str, model: str, req: dict, timeout: float) -> dict:
    body = {
        "model": model,
        "prompt": req["prompt"],
        "max_tokens": req["max_tokens"],
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.time()
    last = t0
    chunks = []  # (gap_seconds, tokens)
    usage = None
    err = None
    try:
        with requests.post(f"{base}/v1/completions", json=body, stream=True, timeout=timeout) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line or not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                if obj.get("usage"):
                    usage = obj["usage"]
                for ch in obj.get("choices") or []:
                    ids = ch.get("token_ids")
                    n = len(ids) if ids is not None else (1 if ch.get("text") else 0)
                    if n:
                        now = time.time()
                        chunks.append((now - last, n))
                        last = now
    except Exception as e:  # noqa: BLE001 - recorded, counted as an error
        err = repr(e)
    t1 = time.time()
    return {
        "kind": req["kind"],
        "max_tokens": req["max_tokens"],
        "start": t0,
        "end": t1,
        "ttft": chunks[0][0] if chunks else None,
        "chunks": chunks,
        "completion_tokens": (usage or {}).get("completion_tokens"),
        "error": err,
    }


def run_phase(
    base: str,
    model: str,
    concurrency: int,
    seconds: float,
    max_requests: int,
    seed: int,
    friendly_share: float,
    min_tokens: int,
    max_tokens: int,
    timeout: float,
) -> dict:
    lock = threading.Lock()
    results: list[dict] = []
    counter = {"next": 0}
    t_start = time.time()
    deadline = t_start + seconds

    def worker():
        while True:
            with lock:
                i = counter["next"]
                if i >= max_requests or time.time() >= deadline:
                    return
                counter["next"] += 1
            req = make_request(seed * 100003 + i, friendly_share, min_tokens, max_tokens)
            res = one_request(base, model, req, timeout)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + timeout + 30)
    t_end = time.time()
    ok = [r for r in results if not r["error"]]
    tokens = sum(r["completion_tokens"] or sum(n for _, n in r["chunks"]) for r in ok)
    per_token = []
    per_chunk = []
    tpot = []
    kinds: dict[str, int] = {}
    for r in ok:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        decode = r["chunks"][1:]
        for gap, n in decode:
            per_token.extend([gap / n] * n)
            per_chunk.append(gap)
        ntok = sum(n for _, n in decode)
        if ntok:
            tpot.append(sum(g for g, _ in decode) / ntok)
    wall = max((r["end"] for r in results), default=t_end) - t_start
    return {
        "concurrency": concurrency,
        "t_start": t_start,
        "t_end": max((r["end"] for r in results), default=t_end),
        "requests": len(results),
        "errors": len(results) - len(ok),
        "first_error": next((r["error"] for r in results if r["error"]), None),
        "kinds": kinds,
        "completion_tokens": tokens,
        "wall_seconds": wall,
        "tokens_per_second": tokens / wall if wall > 0 else None,
        "per_token_latency_p50_s": quantile(per_token, 0.5),
        "per_token_latency_p99_s": quantile(per_token, 0.99),
        "chunk_gap_p50_s": quantile(per_chunk, 0.5),
        "chunk_gap_p99_s": quantile(per_chunk, 0.99),
        "decode_tokens_per_chunk": len(per_token) / len(per_chunk) if per_chunk else None,
        "request_tpot_p50_s": quantile(tpot, 0.5),
        "request_tpot_p99_s": quantile(tpot, 0.99),
        "ttft_p50_s": quantile([r["ttft"] for r in ok if r["ttft"] is not None], 0.5),
    }


def parse_phases(spec: str) -> list[tuple[int, float, int]]:
    out = []
    for part in spec.split(","):
        c, s, n = part.split(":")
        out.append((int(c), float(s), int(n)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="http://127.0.0.1:PORT (loopback only)")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--phases", required=True, help="concurrency:seconds:max_requests,...")
    ap.add_argument("--gap", type=float, default=0.0, help="idle seconds between phases")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--friendly-share", type=float, default=0.6)
    ap.add_argument("--min-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=120.0, help="per request")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    host = a.base.split("://", 1)[-1].split(":")[0].split("/")[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        print(f"refusing non-loopback target {a.base}", file=sys.stderr)
        return 2
    phases = []
    for k, (c, s, n) in enumerate(parse_phases(a.phases)):
        if k and a.gap:
            time.sleep(a.gap)
        ph = run_phase(a.base, a.model, c, s, n, a.seed + k, a.friendly_share, a.min_tokens, a.max_tokens, a.timeout)
        print(json.dumps({k: v for k, v in ph.items() if k not in ("first_error",)}), file=sys.stderr, flush=True)
        phases.append(ph)
        with open(a.out, "w") as fh:
            json.dump({"phases": phases}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
