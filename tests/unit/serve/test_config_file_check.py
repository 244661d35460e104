"""The config file is looked at once per evaluation: at every tick without evaluation_interval,
once per evaluation_interval with it; a SIGHUP or API reload is taken at the next tick either way."""

from __future__ import annotations

import pytest

from specwatch.config import from_mapping
from specwatch.serve import service as service_module
from specwatch.serve.service import Service

CLOSED = {"targets": [{"name": "t", "url": "http://127.0.0.1:9/metrics"}], "listen": "127.0.0.1:0"}


class _CountingSource:
    """A config file that never changes, counting how often it is looked at."""

    def __init__(self) -> None:
        self.looks = 0
        self.loads = 0

    def changed(self) -> bool:
        self.looks += 1
        return False

    def load(self):
        self.loads += 1
        raise service_module.ConfigError("config", "refused, to count the load")


@pytest.mark.parametrize(
    ("extra", "looks"), [({"evaluation_interval": "1s"}, 11), ({"evaluation_interval": "5s"}, 3), ({}, 3)]
)
def test_the_config_file_is_looked_at_once_per_evaluation(monkeypatch, extra, looks):
    config = from_mapping({**CLOSED, "poll_interval": "1s", **extra}, environ={})
    source = _CountingSource()
    service = Service(config, source=source)  # type: ignore[arg-type]
    clock = [100.0]
    monkeypatch.setattr(service_module.time, "monotonic", lambda: clock[0])
    try:
        for tick in range(11):
            clock[0] = 100.0 + tick
            service._reload_if_due()
        assert source.looks == looks
        service.request_reload()  # SIGHUP: at the next tick, whenever the file was last looked at
        clock[0] += 1.0
        service._reload_if_due()
        assert source.loads == 1
    finally:
        monkeypatch.undo()
        service.stop()
