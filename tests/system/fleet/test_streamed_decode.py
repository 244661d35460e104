"""The streamed decode of a vector answer (promsource.VectorDecoder) must give what json.loads and
the checks on the whole answer gave: the same series and values (NaN included), the same
grouping and evaluations, and the same failure reason, on Prometheus's own answers and on odd or
hostile ones, however the body is cut into chunks. (No Prometheus needed: answers are built in
the query API's shape; one test serves them on loopback.)"""

from __future__ import annotations

import http.server
import json
import math
import threading
from collections.abc import Iterator

import pytest

from specwatch.base.logsetup import capture_logs
from specwatch.config import from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet.client import PromClient, PromQueryError, Sample, Vector, VectorDecoder, _vector
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.fleet.grouping import WindowGrouper

from .test_grouping import NOW, _answer, _config

OK = '{"status":"success","data":{"resultType":"vector","result":%s}}'


def prometheus_body(samples: list[Sample], extra: str = "") -> bytes:
    """As Prometheus writes it: labels sorted, no whitespace, values as strings."""
    items = [{"metric": dict(sorted(s.labels.items())), "value": [NOW, _text(s.value)]} for s in samples]
    result = json.dumps(items, separators=(",", ":"))
    return (OK % result).encode()[:-1] + extra.encode() + b"}"


def _text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def reference(body: bytes) -> list[tuple[dict[str, object], float]] | str:
    """What the client did before streaming: json.loads, the answer's checks, then the series."""
    try:
        return _series(_vector(PromClient._decode(200, body)))
    except PromQueryError as error:
        return error.reason


def streamed(
    body: bytes, chunk: int, intern: dict[bytes, bytes] | None = None
) -> list[tuple[dict[str, object], float]] | str:
    decoder = VectorDecoder(intern)
    for i in range(0, len(body), chunk):
        decoder.feed(body[i : i + chunk])
    try:
        return _series(decoder.finish())
    except PromQueryError as error:
        return error.reason


def _series(vector: Vector) -> list[tuple[dict[str, object], float]]:
    # NaN != NaN: compared as a marker.
    return [(dict(s.labels), s.value if not math.isnan(s.value) else "nan") for s in vector]  # type: ignore[misc]


REPLICAS = _answer("vllm-0", 0.6) + _answer("vllm-1", 0.4, scale=2.0)
ITEM = '{"metric":{"pod":"p","specwatch_family":"drafts"},"value":[1800000000.5,"7"]}'

HOSTILE = {
    # Prometheus's own shapes
    "empty": b'{"status":"success","data":{"resultType":"vector","result":[]}}',
    "empty, spaced": b'{"status":"success","data":{"resultType":"vector","result":[ ]}}',
    "one": (OK % f"[{ITEM}]").encode(),
    "nan and infinities": (
        OK
        % "[%s]"
        % ",".join(
            ITEM.replace('"7"', f'"{v}"').replace('"p"', f'"p{i}"')
            for i, v in enumerate(("NaN", "+Inf", "-Inf", "-0", "1e400"))
        )
    ).encode(),
    "warnings": (OK % f"[{ITEM}]").encode()[:-1] + b',"warnings":["store unreachable"]}',
    "empty warnings and infos": (OK % f"[{ITEM}]").encode()[:-1] + b',"warnings":[],"infos":["x"]}',
    "integer time": (OK % "[%s]" % ITEM.replace("1800000000.5", "1800000000")).encode(),
    # other writers: whitespace, key order, escapes
    "pretty": json.dumps(json.loads(OK % f"[{ITEM},{ITEM}]"), indent=2).encode(),
    "space after the result": (OK % f"[{ITEM} , {ITEM} ]").encode(),
    "value first": (OK % '[{"value":[1,"3"],"metric":{"pod":"p"}}]').encode(),
    "status last": b'{"data":{"resultType":"vector","result":[' + ITEM.encode() + b']},"status":"success"}',
    "braces and quotes in a label": (OK % '[{"metric":{"pod":"a}{\\"]},"},"value":[1,"2"]},%s]' % ITEM).encode(),
    "escaped label": (OK % '[{"metric":{"pod":"\\u00e9\\n"},"value":[1,"2"]}]').encode(),
    "utf-8 label": (OK % '[{"metric":{"pod":"é"},"value":[1,"2"]}]').encode(),
    "escaped value": (OK % '[{"metric":{"pod":"p"},"value":[1,"\\u0031"]}]').encode(),
    "non-ASCII digit value": (OK % '[{"metric":{"pod":"p"},"value":[1,"\u0661"]}]').encode(),
    "number value": (OK % '[{"metric":{"pod":"p"},"value":[1,5]}]').encode(),
    "string value": (OK % '[{"metric":{"pod":"p"},"value":"x1"}]').encode(),
    "number label": (OK % '[{"metric":{"pod":1},"value":[1,"2"]}]').encode(),
    "list label": (OK % '[{"metric":{"pod":"p","x":["a"]},"value":[1,"2"]}]').encode(),
    "object label": (OK % '[{"metric":{"pod":"p","x":{"a":"b"}},"value":[1,"2"]}]').encode(),
    "duplicate label": (OK % '[{"metric":{"pod":"a","pod":"b"},"value":[1,"2"]}]').encode(),
    "extra field": (OK % '[{"metric":{"pod":"p"},"value":[1,"2"],"x":{}}]').encode(),
    "data given twice": (OK % f"[{ITEM}]").encode()[:-1]
    + b',"data":{"resultType":"vector","result":[{"metric":{"pod":"q"},"value":[1,"9"]}]}}',
    "result given twice": (OK % f"[{ITEM}]").encode()[:-2] + b',"result":[]}}',
    "status error later": (OK % f"[{ITEM}]").encode()[:-1] + b',"status":"error","error":"too many samples"}',
    "result given as the sentinel's kind": (OK % f"[{ITEM}]").encode()[:-2] + b',"result":"specwatch-streamed-0"}}',
    # not answers
    "matrix": b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
    "error": b'{"status":"error","errorType":"execution","error":"query processing would load too many samples"}',
    "error, plain": b'{"status":"error","error":"bad"}',
    "not json": b"<html>proxy error</html>",
    "nothing": b"",
    "prefix only": b'{"status":"success","data":{"resultType":"vector","result":[',
    "truncated item": (OK % f"[{ITEM}]").encode()[:-20],
    "truncated tail": (OK % f"[{ITEM}]").encode()[:-1],
    "extra data": (OK % f"[{ITEM}]").encode() + b"{}",
    "trailing comma": (OK % f"[{ITEM},]").encode(),
    "missing comma": (OK % f"[{ITEM}{ITEM}]").encode(),
    "bad value": (OK % "[%s]" % ITEM.replace('"7"', '"seven"')).encode(),
    "bad time": (OK % "[%s]" % ITEM.replace("1800000000.5", "01.5")).encode(),
    "missing value": (OK % '[{"metric":{"pod":"p"}}]').encode(),
    "short value": (OK % '[{"metric":{"pod":"p"},"value":[1]}]').encode(),
    "labels not an object": (OK % '[{"metric":["pod","p"],"value":[1,"2"]}]').encode(),
    "item not an object": (OK % '["x"]').encode(),
    "control character in a label": (OK % '[{"metric":{"pod":"a\tb"},"value":[1,"2"]}]').encode(),
    "invalid UTF-8 in a label": (OK % '[{"metric":{"pod":"XX"},"value":[1,"2"]}]').encode().replace(b"XX", b"\xff\xfe"),
    "unclosed label set": (OK % '[{"metric":{"pod":"p","value":[1,"2"]}]').encode(),
    "long label": (OK % ('[{"metric":{"pod":"%s"},"value":[1,"2"]}]' % ("x" * 300_000))).encode(),
    "long odd label": (OK % ('[{"metric":{"pod":"%s}"},"value":[1,"2"]}]' % ("x" * 300_000))).encode(),
}


def _chunkings(body: bytes) -> Iterator[int]:
    yield from (1, 2, 7, 61, 64 * 1024)
    yield max(len(body), 1)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_an_answer_streams_as_json_loads_reads_it(name: str) -> None:
    body = HOSTILE[name]
    expected = reference(body)
    for chunk in _chunkings(body) if len(body) < 10_000 else (64 * 1024, len(body)):
        assert streamed(body, chunk) == expected, (name, chunk)


def _grouped(vector: Vector | str) -> object:
    if isinstance(vector, str):
        return vector
    try:
        return WindowGrouper(("pod",), []).group(vector)
    except PromQueryError as error:
        return error.reason


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_an_answer_streamed_groups_as_json_loads_reads_it(name: str) -> None:
    body = HOSTILE[name]
    try:
        old: Vector | str = _vector(PromClient._decode(200, body))
    except PromQueryError as error:
        old = error.reason
    decoder = VectorDecoder()
    for i in range(0, len(body), 7):
        decoder.feed(body[i : i + 7])
    try:
        new: Vector | str = decoder.finish()
    except PromQueryError as error:
        new = error.reason
    assert _grouped(new) == _grouped(old)


@pytest.mark.parametrize("name", ["long label", "long odd label"])
def test_a_long_item_dripping_byte_by_byte_is_scanned_once_it_may_have_ended(name: str) -> None:
    """Not once per chunk: 300,000 one-byte chunks would copy and rescan ~45 GB."""
    body = HOSTILE[name]
    assert streamed(body, 1) == reference(body)


def test_prometheus_answers_stream_packed_and_interned() -> None:
    body = prometheus_body(REPLICAS)
    intern: dict[bytes, bytes] = {}
    first, again = VectorDecoder(intern), VectorDecoder(intern)
    first.feed(body)
    again.feed(body)
    a, b = first.finish(), again.finish()
    assert a.keys is not None and b.keys is not None and a.items == []  # the fast path, no dicts
    assert len(intern) == len(REPLICAS)
    assert all(x is y for x, y in zip(a.keys, b.keys, strict=True))  # one object per label set
    for chunk in _chunkings(body):
        assert streamed(body, chunk) == reference(body)


@pytest.mark.parametrize("values", [(float("nan"), float("inf")), (float("-inf"), -1.0), (0.0, 1e-300)])
def test_odd_values_group_and_evaluate_as_before(values: tuple[float, float]) -> None:
    samples = list(REPLICAS)
    samples[0] = Sample(samples[0].labels, values[0])  # drafts of vllm-0
    samples[-1] = Sample(samples[-1].labels, values[1])  # a bucket of vllm-1
    body = prometheus_body(samples)
    old = _vector(PromClient._decode(200, body))
    new = VectorDecoder()
    new.feed(body)
    packed = new.finish()
    assert WindowGrouper(("pod",), []).group(packed) == WindowGrouper(("pod",), []).group(old)
    fresh = [Sample({"pod": pod}, NOW - 5) for pod in ("vllm-0", "vllm-1")]
    before, after = FleetEvaluator(_config()), FleetEvaluator(_config())
    for t in (NOW, NOW + 15.0):
        assert after.evaluate(t, {"1m": packed, "5m": packed}, fresh) == before.evaluate(
            t, {"1m": old, "5m": old}, fresh
        )


def test_streamed_and_decoded_answers_share_plans_and_group_alike() -> None:
    """One evaluator fed a streamed answer, then the same answer decoded, then streamed again."""
    body = prometheus_body(REPLICAS)
    evaluator, fresh_one = FleetEvaluator(_config()), FleetEvaluator(_config())
    for i in range(3):
        decoder = VectorDecoder()
        decoder.feed(body)
        vector = decoder.finish() if i != 1 else _vector(PromClient._decode(200, body))
        assert evaluator.group({"1m": vector, "5m": vector}) == fresh_one.group({"1m": REPLICAS, "5m": REPLICAS})


# -- over HTTP (loopback) ---------------------------------------------------------------------
class _Answers(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""
    status = 200

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _fleet(srv: http.server.ThreadingHTTPServer) -> FleetSource:
    port = srv.server_address[1]
    prometheus = {"url": f"http://127.0.0.1:{port}", "replica_labels": ["pod"], "scrape_interval": "15s"}
    config = from_mapping(
        {"windows": ["1m", "5m"], "decision": {"min_drafts": 100, "hold": 1}, "prometheus": prometheus}, environ={}
    )
    return FleetSource(FleetEvaluator(config))


@pytest.mark.parametrize("name", ["one", "nan and infinities", "warnings", "error", "not json", "data given twice"])
def test_the_client_streams_as_it_decoded(server: http.server.ThreadingHTTPServer, name: str) -> None:
    _Answers.body, _Answers.status = HOSTILE[name], 200
    client = _fleet(server).client
    try:
        got: object = _series(client.query_vector("up", NOW))
    except PromQueryError as error:
        got = error.reason
    assert got == reference(HOSTILE[name])
    assert client.last_bytes == len(HOSTILE[name])


def test_an_error_status_is_read_whole_as_before(server: http.server.ThreadingHTTPServer) -> None:
    _Answers.body, _Answers.status = HOSTILE["error"], 422
    with pytest.raises(PromQueryError) as error:
        _fleet(server).client.query_vector("up", NOW)
    assert error.value.reason == "limit"


def test_a_selector_that_matches_nothing_is_logged_once_and_served(server: http.server.ThreadingHTTPServer) -> None:
    fleet = _fleet(server)
    _Answers.status = 200
    with capture_logs() as logs:
        for body in (HOSTILE["empty"], HOSTILE["empty"], prometheus_body(REPLICAS), HOSTILE["empty"]):
            _Answers.body = body
            assert fleet.poll(NOW) is not None
            empty = body == HOSTILE["empty"]
            assert fleet.evaluator.state().series == (0 if empty else len(REPLICAS) * 2)
    warned = [e for e in logs if e["event"] == "prometheus_selector_matches_nothing"]
    assert len(warned) == 2  # once per episode: polls 1-2, then poll 4
    assert warned[0]["log_level"] == "warning"


def test_the_label_set_table_forgets_replicas_gone_for_good(server: http.server.ThreadingHTTPServer) -> None:
    client = _fleet(server).client
    _Answers.status = 200
    for i in range(12):
        _Answers.body = prometheus_body(_answer(f"vllm-{i}", 0.5) * 1)
        client.query_vector("up", NOW)
        assert len(client.label_sets) <= 2 * sum(client._recent) + 1024
    samples = [s for i in range(120) for s in _answer(f"old-{i}", 0.5)]
    _Answers.body = prometheus_body(samples)
    client.query_vector("up", NOW)
    for _ in range(5):
        _Answers.body = prometheus_body(_answer("vllm-new", 0.5))
        client.query_vector("up", NOW)
    assert len(client.label_sets) < len(samples)


def test_a_family_label_is_needed_as_before() -> None:
    body = (OK % '[{"metric":{"pod":"p"},"value":[1,"2"]}]').encode()
    decoder = VectorDecoder()
    decoder.feed(body)
    assert WindowGrouper(("pod",), []).group(decoder.finish()) == {}
    assert promql.FAMILY_LABEL == "specwatch_family"
