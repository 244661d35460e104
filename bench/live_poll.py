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

The ratios are the point (same run, same thread); the absolute figures depend on the CPU.
"""

from __future__ import annotations

import argparse
import itertools
import time

from prometheus_client import generate_latest

from specwatch.export.page import render_page
from specwatch.export.status import encode_status
from specwatch.serve.service import Service
from specwatch.sidecar.scrape import ScrapeResult

from . import payloads
from .common import median
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


def _cpu(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def measure(polls: int = 60) -> dict[str, float]:
    seq = payloads.sim_sequence(1, HOUR_POLLS + polls + 1)
    config = config_for_scenario(payloads._scenario_file("bench-live", payloads.dp_scenario_yaml(1, 4000)))
    clock = _Clock()
    service = Service(config, clock=clock)
    answer = _Answer()
    for name in service.poller.scrapers:
        service.poller.scrapers[name] = answer  # type: ignore[assignment]
    try:
        it = iter(seq)
        for t, text in itertools.islice(it, HOUR_POLLS):
            clock.now, answer.text = t, text
            service.poll_once()
        poll, peer, page, page_again, status, metrics = [], [], [], [], [], []
        plain_page, plain_status, plain_metrics = [], [], []
        for t, text in it:
            clock.now, answer.text = t, text
            poll.append(_cpu(service.poll_once))
            peer.append(_cpu(lambda text=text: pc_parse(text)))
            published = service.published
            page.append(_cpu(lambda published=published: published.page))
            page_again.append(_cpu(lambda published=published: published.page))
            status.append(_cpu(lambda published=published: published.status))
            metrics.append(_cpu(lambda published=published: published.metrics))
            # The plain renderings of the same view, every poll: what rendering on read saves.
            view = published.view
            plain_page.append(_cpu(lambda view=view: render_page(view, service.page_history)))
            plain_status.append(_cpu(lambda view=view: encode_status(view)))
            plain_metrics.append(_cpu(lambda: generate_latest(service.registry)))
    finally:
        service.stop()
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
    }
    out["peer_over_poll"] = out["peer_parse_ms"] / out["poll_ms"]
    out["peer_over_poll_plus_page_every_5_polls"] = out["peer_parse_ms"] / (
        out["poll_ms"] + out["page_first_read_ms"] / 5
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=60)
    args = parser.parse_args()
    for key, value in measure(args.polls).items():
        print(f"{key:42s} {value:10.3f}")


if __name__ == "__main__":
    main()
