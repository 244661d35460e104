"""`specwatch backtest`'s arguments (fleet/backtest.py); the runs themselves are in tests/system/fleet."""

from __future__ import annotations

import pytest

from specwatch.config import ConfigError, from_mapping
from specwatch.fleet.backtest import Backtest, main


def _config():
    return from_mapping({"prometheus": {"url": "http://127.0.0.1:9"}}, environ={})


def test_a_baseline_start_after_the_backtests_start_is_refused_naming_the_flag():
    with pytest.raises(ConfigError) as err:
        next(Backtest(_config()).run(1000.0, 2000.0, 60.0, baseline_from=1060.0))
    assert err.value.key == "--baseline-from"


def test_the_command_line_says_which_time_is_unreadable_and_exits_2(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text("prometheus: {url: 'http://127.0.0.1:9'}\n")
    code = main(["--config", str(path), "--start", "0", "--end", "60", "--baseline-from", "yesterday"])
    assert code == 2
    assert "--baseline-from" in capsys.readouterr().err
