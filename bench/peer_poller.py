"""The peer of bench/live_loop.py: polls one /metrics every INTERVAL seconds with requests and parses
each answer with prometheus_client's parser (every sample materialised), and does nothing else.

    python -m bench.peer_poller URL INTERVAL

Prints one line per poll (its number and the samples parsed), so the work cannot be skipped and
the benchmark can count the polls. A failed request (a simulator slower than INTERVAL on a loaded
host) prints `error` and its kind, and the poller goes on at its next tick, as a poller in
production would: the benchmark counts these lines.
"""

from __future__ import annotations

import sys
import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def main(url: str, interval: float) -> None:
    session = requests.Session()
    session.trust_env = False  # as specwatch: no proxy from the environment
    polls = 0
    due = time.monotonic()
    while True:
        try:
            response = session.get(url, timeout=interval)
        except requests.RequestException as exc:
            print("error", type(exc).__name__, flush=True)
        else:
            samples = sum(len(family.samples) for family in text_string_to_metric_families(response.text))
            polls += 1
            print(polls, samples, flush=True)
        due += interval
        time.sleep(max(0.0, due - time.monotonic()))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
