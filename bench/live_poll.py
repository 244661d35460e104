"""The running sidecar's cost per poll with a full hour of page history.

`python -m bench.live_poll [--polls N]`: a Service (the one `specwatch run` runs) over a sequence
of simulator payloads (one DP engine, 5 s polls), its scrapers answered in memory so only the
sidecar's own work is timed. After an hour of polls (720, the page history's full horizon) it
times, in alternation and in CPU time of this thread (time.thread_time), on the same payloads:

- `Service.poll_once`: fetch (in memory), parse, ingest, evaluate, publish, with nobody reading;
- the peer: prometheus_client's `text_string_to_metric_families` on the same text, every sample
  materialised (bench/parse_cost.py's peer);
- a request for `/`, `/api/v1/status` and `/metrics` after the poll: the first read of each
  (rendered on request and kept until the next poll) and a second one (served from that cache).

and the cyclic garbage collector's time inside `Service.poll_once` (gc.callbacks), per poll and by
generation. `--gc-freeze`: the same with `gc.freeze()` after the Service is built (the config, the
cost model and the imported modules out of every collection), to see what that would save a
running sidecar.

The ratios are the point (same run, same thread); the absolute figures depend on the CPU.
"""

from __future__ import annotations

import argparse
import gc
import itertools

from prometheus_client import generate_latest

from specwatch.export.page import render_page
from specwatch.export.status import encode_status
from specwatch.serve.service import Service
from specwatch.sidecar.scrape import ScrapeResult

from . import payloads
from .common import cpu_clock, cpu_seconds, median
from .parse_cost import config_for_scenario, pc_parse

HOUR_POLLS = 720


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Answer:
    """A scraper answered from memory (the payload the bench sets before each poll)."""

    def __init__(self) -> None:
        self.text = ""

    def fetch(self) -> ScrapeResult:
        return ScrapeResult(self.text, 0.001, len(self.text))

    def close(self) -> None:
        return None


class _CollectorTime:
    """CPU time of the garbage collector's passes while `inside` is set, by generation."""

    def __init__(self) -> None:
        self.inside = False
        self.seconds = [0.0, 0.0, 0.0]
        self.passes = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if not self.inside:
            return
        if phase == "start":
            self._start = cpu_clock()
        else:
            generation = info["generation"]
            self.seconds[generation] += cpu_clock() - self._start
            self.passes[generation] += 1


def measure(polls: int = 60, *, gc_freeze: bool = False) -> dict[str, float]:
    seq = payloads.sim_sequence(1, HOUR_POLLS + polls + 1)
    config = config_for_scenario(payloads._scenario_file("bench-live", payloads.dp_scenario_yaml(1, 4000)))
    clock = _Clock()
    service = Service(config, clock=clock)
    answer = _Answer()
    for name in service.poller.scrapers:
        service.poller.scrapers[name] = answer  # type: ignore[assignment]
    if gc_freeze:
        gc.freeze()
    collector = _CollectorTime()
    gc.callbacks.append(collector)
    try:
        it = iter(seq)
        for t, text in itertools.islice(it, HOUR_POLLS):
            clock.now, answer.text = t, text
            service.poll_once()
        poll, peer, page, page_again, status, metrics = [], [], [], [], [], []
        plain_page, plain_status, plain_metrics = [], [], []
        for t, text in it:
            clock.now, answer.text = t, text
            collector.inside = True
            poll.append(cpu_seconds(service.poll_once))
            collector.inside = False
            peer.append(cpu_seconds(lambda text=text: pc_parse(text)))
            published = service.published
            page.append(cpu_seconds(lambda published=published: published.page))
            page_again.append(cpu_seconds(lambda published=published: published.page))
            status.append(cpu_seconds(lambda published=published: published.status))
            metrics.append(cpu_seconds(lambda published=published: published.metrics))
            # The plain renderings of the same view, every poll: what rendering on read saves.
            view = published.view
            plain_page.append(cpu_seconds(lambda view=view: render_page(view, service.page_history)))
            plain_status.append(cpu_seconds(lambda view=view: encode_status(view)))
            plain_metrics.append(cpu_seconds(lambda: generate_latest(service.registry)))
    finally:
        gc.callbacks.remove(collector)
        if gc_freeze:
            gc.unfreeze()
        service.stop()
    timed = len(poll)
    out = {
        "poll_ms": median(poll) * 1e3,
        "peer_parse_ms": median(peer) * 1e3,
        "page_first_read_ms": median(page) * 1e3,
        "page_cached_read_ms": median(page_again) * 1e3,
        "status_first_read_ms": median(status) * 1e3,
        "metrics_first_read_ms": median(metrics) * 1e3,
        "plain_render_page_ms": median(plain_page) * 1e3,
        "plain_encode_status_ms": median(plain_status) * 1e3,
        "plain_generate_latest_ms": median(plain_metrics) * 1e3,
        "payload_bytes": float(len(seq[-1][1])),
        "gc_us_per_poll": sum(collector.seconds) / timed * 1e6,
        **{f"gc_gen{g}_passes_per_100_polls": 100.0 * collector.passes[g] / timed for g in range(3)},
    }
    out["peer_over_poll"] = out["peer_parse_ms"] / out["poll_ms"]
    out["peer_over_poll_plus_page_every_5_polls"] = out["peer_parse_ms"] / (
        out["poll_ms"] + out["page_first_read_ms"] / 5
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() once the Service is built")
    args = parser.parse_args()
    for key, value in measure(args.polls, gc_freeze=args.gc_freeze).items():
        print(f"{key:42s} {value:10.3f}")


if __name__ == "__main__":
    main()
