"""The sidecar's Source (sidecar/source.py): targets fetched in parallel only when there are several."""

from __future__ import annotations

from specwatch.config import from_mapping
from specwatch.serve.service import Service


def _targets(count: int) -> list[dict[str, str]]:
    return [{"name": f"t{i}", "url": f"http://127.0.0.1:9/metrics{i}"} for i in range(count)]  # closed port


def _config(count: int):
    return from_mapping({"targets": _targets(count), "listen": "127.0.0.1:0"}, environ={})


def test_one_target_is_fetched_by_the_poll_thread_without_a_pool():
    service = Service(_config(1))
    try:
        service.poll_once()
        assert service.poller._pool is None
        assert [t.up for t in service.poller.view().targets.targets] == [False]
    finally:
        service.stop()


def test_several_targets_get_a_pool_of_their_number_sized_afresh_when_it_changes():
    service = Service(_config(2))
    try:
        service.poll_once()
        pool = service.poller._pool
        assert pool is not None and pool._max_workers == 2
        assert [t.up for t in service.poller.view().targets.targets] == [False, False]
        service.poller.reconfigure(_config(3))
        service.poll_once()
        assert service.poller._pool is not pool and service.poller._pool._max_workers == 3
        assert len(service.poller.view().targets.targets) == 3
    finally:
        service.stop()
