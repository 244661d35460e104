"""Simulated vLLM: a faithful stand-in for tests, demos and benchmarks.

from specwatch.sim import load_scenario, Simulator, serve, record
sim = Simulator(load_scenario("alpha-drop"), seed=0)
sim.advance_to(120.0)
text = sim.render()          # vLLM /metrics text at sim time 120 s
sim.truth()                  # true alpha, K, batch, break-even, verdict per route
h = serve("alpha-drop", speed=20)    # loopback HTTP server, h.url is .../metrics; h.stop()
record("alpha-drop", "out.jsonl", poll_interval=5.0)   # a `specwatch record` recording, no HTTP
for t, evaluations in simulated_polls(sim, pipeline, interval=5.0): ...   # poll a sidecar pipeline, no HTTP
"""

from specwatch.sim.cli import add_parsers
from specwatch.sim.polling import simulated_polls
from specwatch.sim.record import record
from specwatch.sim.scenario import Scenario, ScenarioError, list_scenarios, load_scenario
from specwatch.sim.server import SimServer, serve
from specwatch.sim.simulator import EPOCH_BASE, Simulator, crossings, delivered_gain

__all__ = [
    "EPOCH_BASE",
    "Scenario",
    "ScenarioError",
    "SimServer",
    "Simulator",
    "add_parsers",
    "crossings",
    "delivered_gain",
    "list_scenarios",
    "load_scenario",
    "record",
    "serve",
    "simulated_polls",
]
