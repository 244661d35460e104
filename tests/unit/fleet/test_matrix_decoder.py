"""A range answer is decoded in place, bounded (fleet/client.py MatrixDecoder): points
packed, only those inside the range, with last_only only the newest of a series; hostile bytes
are a PromQueryError, never another exception."""

from __future__ import annotations

import json

import pytest

from specwatch.fleet.client import TIME_SLACK, MatrixDecoder, Points, PromQueryError, _ts


def _answer(values, **extra) -> bytes:
    body = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"route": "chat"}, "values": values}]},
    }
    return json.dumps({**body, **extra}).encode()


def test_only_the_newest_point_inside_the_range_is_kept_and_future_or_infinite_stamps_are_counted():
    decoder = MatrixDecoder(100.0, 200.0, last_only=True)
    (series,) = decoder.decode(_answer([[100, "1"], [150, "2"], [199.5, "3"], [10_000, "9"]]))
    assert list(series.points) == [(199.5, 3.0)] and decoder.out_of_range == 1
    body = _answer([[150, "2"]]).replace(b"[[150", b"[[" + b"9" * 400 + b',"7"],[150')
    decoder = MatrixDecoder(100.0, 200.0, last_only=True)
    (series,) = decoder.decode(body)
    assert list(series.points) == [(150.0, 2.0)] and decoder.out_of_range == 1


def test_at_todays_epoch_a_point_a_rounding_outside_the_range_is_kept_and_one_a_second_outside_is_counted():
    # Times as the API writes them (to the millisecond): the range's ends are rounded when asked
    # and each step's time when answered, so a point sits up to 1 ms outside; a second is not that.
    start, end = 1_765_000_000.0004, 1_765_000_600.0004
    first, last = float(_ts(start)), float(_ts(end)) + 0.0005
    decoder = MatrixDecoder(start, end)
    (series,) = decoder.decode(_answer([[start - 1.0, "0"], [first, "1"], [last, "2"], [end + 1.0, "9"]]))
    assert [t for t, _ in series.points] == [first, last] and decoder.out_of_range == 2
    assert 0.001 <= TIME_SLACK < 1.0


def test_every_point_is_packed_in_order_and_reads_as_pairs():
    (series,) = MatrixDecoder(0.0, 10.0).decode(_answer([[1, "1.5"], [2, "NaN"], [3, "+Inf"]]))
    assert isinstance(series.points, Points) and len(series.points) == 3
    assert series.points[0] == (1.0, 1.5) and series.points[-1][1] == float("inf")


def test_other_members_are_skipped_and_warnings_or_errors_keep_their_reasons():
    (series,) = MatrixDecoder(0.0, 10.0).decode(_answer([[1, "1"]], stats={"a": [[1, 2], {"b": None}]}, infos=[]))
    assert series.labels == {"route": "chat"}
    with pytest.raises(PromQueryError) as partial:
        MatrixDecoder(0.0, 10.0).decode(_answer([[1, "1"]], warnings=["store down"]))
    assert partial.value.reason == "warnings"
    with pytest.raises(PromQueryError) as refused:
        MatrixDecoder(0.0, 10.0).decode(b'{"status":"error","error":"query processing would load too many samples"}')
    assert refused.value.reason == "limit"


@pytest.mark.parametrize(
    "body",
    [
        _answer([[1, "x"]]),
        _answer([[1, 9]]).replace(b"9", b"9" * 400),
        b'{"status":"success","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"status":"success","x":' + b"{" * 50_000 + b"}" * 50_000 + b"}",
        b"[" * 100_000,
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":{"b":"c"}},"values":[]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[]}}',
        b"",
        b"\xff\xfe",
    ],
    ids=[
        "value not a number",
        "400-digit value",
        "deep data",
        "deep member",
        "unclosed",
        "nested labels",
        "vector",
        "empty",
        "not utf-8",
    ],
)
def test_hostile_bytes_are_invalid_never_another_exception(body):
    with pytest.raises(PromQueryError) as failed:
        MatrixDecoder(0.0, 10.0).decode(body)
    assert failed.value.reason == "invalid"


def test_more_series_than_the_cap_is_too_large():
    result = [{"metric": {"i": str(i)}, "values": [[1, "1"]]} for i in range(11)]
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
    with pytest.raises(PromQueryError) as failed:
        MatrixDecoder(0.0, 10.0, max_series=10).decode(body)
    assert failed.value.reason == "too_large"
