"""The fault matrix: one named test per fault.

Each test runs the real Service against a real loopback HTTP target (the simulator's healthy
exposition, served by the hostile server), warms it up to a `keep` verdict, applies one fault for
a few polls, and checks the contract:
  - /metrics answers 200 throughout and passes prometheus_client's parser without duplicates;
  - specwatch_target_up is 0 and specwatch_scrape_errors_total{reason} grew by exactly the polls
    that failed, under the expected reason and no other;
  - the windows are byte-identical to the last good poll and no verdict changed (none logged);
  - no target-derived series is served while the target is down (docs/architecture.md §4: absent, never stale);
  - when the target heals, the next poll is up again, windows move on, the verdict is the same.
"""

from __future__ import annotations

import random
import re

import pytest

from specwatch.base.logsetup import capture_logs
from support.metric_names import TARGET_DERIVED

from .harness import TARGET, names, new_pair, value
from .hostile import (
    HostileServer,
    chunked,
    close_without_answer,
    drip,
    drop_mid_body,
    gzip_bomb,
    hang,
    redirect,
    refused_url,
    respond,
)

WARMUP_POLLS = 8
FAULT_POLLS = 2
TIMEOUT = 1.0
DEADLINE_SLACK = 2.0  # a poll cut by its deadline may overrun it by this much on a loaded machine


@pytest.fixture(params=["4MiB"])
def pair(request):
    server, car = new_pair(timeout=f"{TIMEOUT}s", max_bytes=request.param)
    car.poll(WARMUP_POLLS)
    assert set(car.verdicts().values()) == {"keep"}, car.verdicts()
    yield server, car
    car.close()
    server.stop()


def fault_then_heal(server, car, behaviour, reason, *, polls=FAULT_POLLS, heal=None):
    """Apply `behaviour` for `polls` polls, check the contract, heal, check recovery. Returns poll times."""
    errors_before = car.errors()
    windows_before = car.window_state()
    verdicts_before = car.verdicts()
    took = []
    server.set(behaviour)
    with capture_logs() as logs:
        for _ in range(polls):
            took.append(car.poll())
            metrics = car.scrape()  # HTTP 200 asserted inside
            assert value(metrics, "specwatch_target_up", target=TARGET) == 0.0
            leaked = names(metrics) & set(TARGET_DERIVED)
            assert not leaked, f"served while the target is down: {sorted(leaked)}"
    errors_after = car.errors()
    grown = {r: errors_after[r] - errors_before[r] for r in errors_after if errors_after[r] != errors_before[r]}
    assert grown == {reason: polls}, grown
    assert car.window_state() == windows_before, "a failed poll changed the window state"
    assert car.verdicts() == verdicts_before
    assert not [e for e in logs if e["event"] == "verdict_changed"], logs
    # Heal.
    (heal or (lambda: server.set(car.good())))()
    car.poll()
    metrics = car.scrape()
    assert value(metrics, "specwatch_target_up", target=TARGET) == 1.0
    assert car.verdicts() == verdicts_before
    for label in ("1m", "5m"):
        assert value(metrics, "specwatch_verdict", window=label, verdict="keep") == 1.0
        assert 0.7 < value(metrics, "specwatch_acceptance_ratio", window=label) < 0.9
    after = car.window_state()
    assert all(after[r][1] > windows_before[r][1] for r in windows_before), "the healed poll was not ingested"
    assert car.errors() == errors_after
    return took


# -- network and HTTP faults -------------------------------------------------------------------
def test_connection_refused_counts_connect_and_recovers_when_vllm_listens_again():
    url = refused_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    server = HostileServer(port=port)
    from .harness import Sidecar

    car = Sidecar(server.url, timeout=f"{TIMEOUT}s")
    server.set(car.good())
    try:
        car.poll(WARMUP_POLLS)
        server.stop()  # nothing listens on the port any more
        holder = {}

        def reopen():
            holder["server"] = HostileServer(port=port)
            holder["server"].set(car.good())

        fault_then_heal(server, car, respond(200, b""), "connect", heal=reopen)
    finally:
        car.close()
        server.stop()
        if "server" in locals().get("holder", {}):
            holder["server"].stop()


def test_hung_target_is_cut_by_the_deadline_and_counted_as_timeout(pair):
    server, car = pair
    took = fault_then_heal(server, car, hang(), "timeout")
    assert max(took) < TIMEOUT + DEADLINE_SLACK, took


def test_one_byte_drip_is_cut_by_the_whole_request_deadline_not_per_read_timeouts(pair):
    server, car = pair
    # Every read succeeds within 0.1 s, so only a whole-request deadline can stop it (V5).
    took = fault_then_heal(server, car, drip(lambda: car.render().encode(), interval=0.1), "timeout")
    assert all(TIMEOUT * 0.9 <= t < TIMEOUT + DEADLINE_SLACK for t in took), took


@pytest.mark.parametrize("status", [500, 502, 503, 401])
def test_http_error_status_is_counted_and_its_body_never_parsed(pair, status):
    server, car = pair
    # The body is a valid exposition: it must not be ingested under a non-200 status.
    fault_then_heal(server, car, respond(status, lambda: car.render().encode()), "http_status")


def test_redirect_to_the_metadata_address_is_not_followed(pair):
    server, car = pair
    fault_then_heal(server, car, redirect("http://169.254.169.254/latest/meta-data/iam/"), "http_status")


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_to_another_loopback_server_is_never_requested(pair, status):
    server, car = pair
    with HostileServer() as canary:
        canary.set(car.good())  # a perfectly good payload: following the redirect would "work"
        fault_then_heal(server, car, redirect(canary.url, status), "http_status")
        assert canary.count == 0


def test_connection_dropped_mid_body_is_counted_as_connect(pair):
    server, car = pair
    fault_then_heal(server, car, drop_mid_body(lambda: car.render().encode(), fraction=0.5), "connect")


def test_connection_closed_before_any_response_is_counted_as_connect(pair):
    server, car = pair
    fault_then_heal(server, car, close_without_answer(), "connect")


def test_chunked_body_cut_without_its_terminator_is_rejected(pair):
    server, car = pair
    fault_then_heal(
        server, car, chunked(lambda: car.render().encode(), chunk=4096, terminate=False, fraction=0.6), "connect"
    )


# -- bodies ------------------------------------------------------------------------------------
def _cut_inside_itl_histogram(text: str) -> str:
    """An honest response (correct Content-Length) whose text stops at a line boundary mid-histogram."""
    lines = text.split("\n")
    index = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("vllm:inter_token_latency_seconds_bucket") and 'le="0.1"' in line
    )
    return "\n".join(lines[: index + 1]) + "\n"


def test_body_truncated_at_a_line_boundary_inside_a_histogram_is_invalid(pair):
    server, car = pair
    fault_then_heal(server, car, car.mutated(_cut_inside_itl_histogram), "invalid")


def test_binary_garbage_is_rejected_as_invalid(pair):
    server, car = pair
    rnd = random.Random(8)
    garbage = bytes(rnd.getrandbits(8) for _ in range(64 * 1024))
    fault_then_heal(server, car, respond(200, garbage), "invalid")


def test_an_html_error_page_with_status_200_is_a_parse_error(pair):
    server, car = pair
    page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>\n"
    fault_then_heal(server, car, respond(200, page), "parse")


def test_gzip_bomb_of_200_mib_aborts_at_max_bytes(pair):
    server, car = pair
    fault_then_heal(server, car, gzip_bomb(200 * 2**20), "too_large")


def test_body_over_max_bytes_with_an_honest_content_length_is_too_large(pair):
    server, car = pair
    body = lambda: car.render().encode() + b"# padding\n" * (500 * 1024)  # ~5 MiB > 4 MiB
    fault_then_heal(server, car, respond(200, body), "too_large")


def test_chunked_body_over_max_bytes_without_content_length_is_too_large(pair):
    server, car = pair
    body = lambda: car.render().encode() + b"# padding\n" * (500 * 1024)
    fault_then_heal(server, car, chunked(body), "too_large")


def _huge_label_line(family: str, n: int) -> str:
    labels = ",".join(f'l{i:05d}="v{i}"' for i in range(n))
    return f"{family}{{{labels}}} 1.0\n"


def test_a_series_with_32000_labels_in_a_family_specwatch_reads_is_rejected(pair):
    server, car = pair
    took = fault_then_heal(
        server, car, car.mutated(lambda t: t + _huge_label_line("vllm:num_requests_running", 32_000)), "invalid"
    )
    assert max(took) < 5.0, took  # bounded parse cost (V4: prometheus_client needs 3.8 s for this line)


def test_a_series_with_32000_labels_in_a_family_specwatch_ignores_costs_nothing(pair):
    server, car = pair
    extra = "# TYPE vllm:hostile_labels gauge\n" + _huge_label_line("vllm:hostile_labels", 32_000)
    server.set(car.mutated(lambda t: t + extra))
    took = car.poll()
    assert car.up() == 1.0 and sum(car.errors().values()) == 0
    assert took < 5.0, took


def _many_series(family: str, n: int, label: str = "engine") -> str:
    return f"# TYPE {family} gauge\n" + "".join(f'{family}{{{label}="{i}"}} 1.0\n' for i in range(n))


@pytest.mark.parametrize("pair", ["16MiB"], indirect=True)  # the default max_bytes: the series cap must act
def test_100000_extra_series_of_a_family_specwatch_reads_are_rejected(pair):
    server, car = pair
    fault_then_heal(
        server,
        car,
        car.mutated(
            lambda t: (
                t.replace("# TYPE vllm:num_requests_running gauge\n", "")
                + _many_series("vllm:num_requests_running", 100_000, "hostile")
            )
        ),
        "invalid",
    )


@pytest.mark.parametrize("pair", ["16MiB"], indirect=True)
def test_100000_series_of_other_families_are_accepted_without_growing_specwatch_output(pair):
    server, car = pair
    before = len(car.scrape())
    server.set(car.mutated(lambda t: t + _many_series("vllm:hostile_series", 100_000)))
    took = car.poll()
    assert car.up() == 1.0 and sum(car.errors().values()) == 0
    assert len(car.scrape()) == before
    assert took < 5.0, took


# -- semantic validation (V1) ------------------------------------------------------------------
def _set_first(text: str, prefix: str, new_value: str) -> str:
    pattern = re.compile(rf"^({re.escape(prefix)}(?:{{[^\n]*}})?) \S+$", re.MULTILINE)
    out, n = pattern.subn(lambda m: f"{m.group(1)} {new_value}", text, count=1)
    assert n == 1, prefix
    return out


@pytest.mark.parametrize(
    "sample,bad",
    [
        ("vllm:spec_decode_num_drafts_total", "-1.0"),
        ("vllm:spec_decode_num_accepted_tokens_total", "NaN"),
        ("vllm:spec_decode_num_draft_tokens_total", "+Inf"),
        ("vllm:generation_tokens_total", "-5"),
        ("vllm:num_requests_running", "NaN"),
    ],
    ids=["negative-counter", "nan-counter", "inf-counter", "negative-generation", "nan-gauge"],
)
def test_impossible_sample_values_are_rejected(pair, sample, bad):
    server, car = pair
    fault_then_heal(server, car, car.mutated(lambda t: _set_first(t, sample, bad)), "invalid")


def _bucket_goes_down(text: str) -> str:
    lines = text.split("\n")
    i = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("vllm:inter_token_latency_seconds_bucket") and 'le="0.5"' in line
    )
    lines[i] = re.sub(r" \S+$", " 0.0", lines[i])
    return "\n".join(lines)


def _drop_inf_bucket(text: str) -> str:
    return "\n".join(
        line
        for line in text.split("\n")
        if not (line.startswith("vllm:inter_token_latency_seconds_bucket") and 'le="+Inf"' in line)
    )


def _duplicate_series(text: str) -> str:
    line = next(line for line in text.split("\n") if line.startswith("vllm:spec_decode_num_drafts_total"))
    return text + line + "\n"


def _type_changes(text: str) -> str:
    out = text.replace(
        "# TYPE vllm:spec_decode_num_drafts_total counter", "# TYPE vllm:spec_decode_num_drafts_total gauge"
    )
    out = out.replace("# TYPE vllm:spec_decode_num_drafts counter", "# TYPE vllm:spec_decode_num_drafts gauge")
    assert out != text
    return out


def _non_numeric_le(text: str) -> str:
    lines = text.split("\n")
    i = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("vllm:inter_token_latency_seconds_bucket") and 'le="0.5"' in line
    )
    lines[i] = lines[i].replace('le="0.5"', 'le="abc"')
    return "\n".join(lines)


def _count_differs_from_inf(text: str) -> str:
    return _set_first(text, "vllm:inter_token_latency_seconds_count", "1e15")


@pytest.mark.parametrize(
    "change",
    [_bucket_goes_down, _drop_inf_bucket, _duplicate_series, _type_changes, _non_numeric_le, _count_differs_from_inf],
    ids=[
        "histogram-bucket-goes-down",
        "histogram-missing-inf",
        "duplicate-series",
        "family-type-changes",
        "non-numeric-le",
        "count-differs-from-inf-bucket",
    ],
)
def test_semantically_invalid_payloads_are_rejected_as_a_whole(pair, change):
    server, car = pair
    fault_then_heal(server, car, car.mutated(change), "invalid")


def test_an_empty_200_body_is_a_failed_poll_not_a_spec_off_verdict(pair):
    server, car = pair
    # An empty body (V11: a filtered multiprocess registry) looks like "no spec families" to a naive
    # reader; it must not become a spec_off verdict.
    server.set(respond(200, b""))
    with capture_logs() as logs:
        car.poll(3)
    assert not [e for e in logs if e["event"] == "verdict_changed"], logs
    assert set(car.verdicts().values()) == {"keep"}
