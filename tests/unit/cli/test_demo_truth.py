"""The demo tells one story: the break-even it prints comes from the cost model the sidecar uses,
a scenario's description carries no break-even the model contradicts, and a fault is shown as one."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest

from specwatch import costmodel
from specwatch.cli.demo import ALT_SCREEN_OFF, ALT_SCREEN_ON, CLEAR, breakeven_line, demo_config, render_table
from specwatch.config.cost_model import cost_model_from_config, route_cost_model
from specwatch.sim.describe import PLACEHOLDER, DescriptionError, describe
from specwatch.sim.scenario import list_scenarios, load_scenario
from specwatch.sim.simulator import Simulator
from specwatch.view.targets import State, TargetState

#: How a typed break-even reads: "~0.48", "break-even is 0.48", "(0.14, 0.30, ...".
TYPED_BREAKEVEN = re.compile(r"~0\.\d|reak-even (?:is |of |at [^,]*? is )?~?0\.\d|\(0\.\d+, 0\.\d")


def truth_breakevens(name: str) -> set[float]:
    sim = Simulator(name)
    seen = set()
    t = 0.0
    while t <= sim.scenario.duration:
        sim.advance_to(t)
        for values in sim.truth()["routes"].values():
            if values["breakeven_acceptance_rate"] is not None:
                seen.add(round(values["breakeven_acceptance_rate"], 3))
        t += 30.0
    return seen


@pytest.mark.parametrize("name", list_scenarios())
def test_a_description_types_no_break_even_and_its_placeholders_are_the_truth_s(name):
    """Break-evens in a description are placeholders the simulator's model fills, never typed."""
    scenario = load_scenario(name)
    raw = " ".join(scenario.description.split())
    for sentence in re.split(r"[.:]\s", raw):
        if "reak-even" in sentence:
            assert not TYPED_BREAKEVEN.search(sentence), (name, sentence)
    text = describe(scenario)
    assert "{" not in text
    truth = truth_breakevens(name)
    for match in PLACEHOLDER.finditer(raw):
        batch, k = int(match.group(1)), int(match.group(2) or scenario.num_speculative_tokens)
        filled = Simulator(scenario).timer.breakeven(float(batch), k)
        assert f"{filled:.2f}" in text
        if k == scenario.num_speculative_tokens:
            assert any(abs(filled - be) <= 0.005 for be in truth), (name, batch, filled, sorted(truth))


def test_a_placeholder_at_k_zero_is_refused():
    scenario = replace(load_scenario("steady"), description="break-even {breakeven@64:0}")
    with pytest.raises(DescriptionError, match="K > 0"):
        describe(scenario)


@pytest.mark.parametrize("name", ["alpha-drop", "steady", "batch-surge", "mixed-routes"])
def test_the_printed_break_even_is_the_sidecar_s(name):
    scenario = load_scenario(name)
    truth = Simulator(scenario).truth()
    line = breakeven_line(truth)
    config = demo_config(
        scenario, target_url="http://127.0.0.1:9/metrics", port=0, poll_interval=1.0, windows=("5s", "15s"), speed=10.0
    )
    # the simulated vLLM's routes, as the sidecar prices them (its detected engine's prior)
    cm = route_cost_model(cost_model_from_config(config), config, "vllm", None)
    for route, values in truth["routes"].items():
        sidecar = costmodel.breakeven_acceptance_rate(cm, values["nominal_batch"], values["k"])
        printed = float(re.search(rf"{route} ([\d.]+) at batch", line).group(1))
        assert abs(printed - sidecar) <= 0.002, (name, route, printed, sidecar)


def test_the_demo_alert_window_is_one_of_its_windows():
    from specwatch.serve.reload import alert_window_warning

    config = demo_config(
        load_scenario("alpha-drop"),
        target_url="http://127.0.0.1:9/metrics",
        port=0,
        poll_interval=1.0,
        windows=("5s", "15s"),
        speed=10.0,
    )
    assert alert_window_warning(config) is None
    assert config.evaluation_period == config.poll_interval  # faster than real time: every poll evaluated


def test_a_down_target_is_shown_as_down_not_waiting():
    target = TargetState(
        name="vllm",
        url="u",
        up=False,
        last_success=None,
        scrape_duration=None,
        errors={"http_500": 3},
        resets=0,
        schema=None,
        polls=3,
    )
    frame = render_table(State(t=1.0, targets=(target,), routes=(), evaluated=False))
    assert "DOWN" in frame and "http_500" in frame and "waiting" not in frame


def test_the_table_redraws_in_place_on_a_tty_and_appends_otherwise():
    from specwatch.cli import demo

    frames = []
    for tty in (True, False):
        out = io.StringIO()
        demo.run_demo(
            scenario_name="steady",
            speed=50,
            duration=0.6,
            poll_interval=0.2,
            windows=("1s",),
            port=0,
            refresh=0.25,
            out=out,
            tty=tty,
        )
        frames.append(out.getvalue())
    assert frames[0].count(CLEAR) >= 2
    # the redraws happen on the alternate screen; the last frame is printed once on the normal one
    assert frames[0].startswith(ALT_SCREEN_ON) and ALT_SCREEN_OFF in frames[0]
    assert frames[0].rsplit(ALT_SCREEN_OFF, 1)[1].count("simulated time") == 1
    assert CLEAR not in frames[1] and ALT_SCREEN_ON not in frames[1] and frames[1].count("simulated time") >= 2


def test_every_frame_fits_an_80_column_terminal():
    from specwatch.cli import demo

    out = io.StringIO()
    demo.run_demo(
        scenario_name="mixed-routes",
        speed=50,
        duration=1.5,
        poll_interval=0.2,
        windows=("1s",),
        port=0,
        refresh=0.5,
        out=out,
        tty=False,
    )
    wide = [line for line in out.getvalue().splitlines() if len(line) > demo.TABLE_WIDTH]
    assert wide == []


def test_ctrl_c_ends_the_demo_with_the_shells_interrupted_status(monkeypatch):
    from specwatch.cli import demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "render_table", interrupted)
    out = io.StringIO()
    code = demo.run_demo(
        scenario_name="steady", speed=50, duration=5.0, poll_interval=0.2, windows=("1s",), port=0, refresh=0.2, out=out
    )
    assert code == 130 and "demo finished (interrupted)" in out.getvalue()
