"""The metric contract's table (specwatch/export/contract.py): what each state becomes on /metrics,
one HELP per family whatever the mode, and the docs that list the families kept to the table."""

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from specwatch.export import contract, metrics_text
from specwatch.export.collector import SpecwatchCollector
from specwatch.verdict.grading import SUMMARY_QUANTITIES, Grading, WindowSummary
from specwatch.view.fleet import FleetRow, FleetState, ReplicaRouteState, RouteBaseline
from specwatch.view.targets import RouteState, State, TargetState
from specwatch.windows.derive import GAUGE_MEAN
from support.builders import route_evaluation, window_stats
from support.prom_oracle import plain_openmetrics, plain_text
from support.views import view_of

REPO = Path(__file__).resolve().parents[3]

TARGET = TargetState(
    name="vllm",
    url="http://127.0.0.1:8000/metrics",
    up=True,
    last_success=1700000000.0,
    scrape_duration=0.25,
    errors={"timeout": 2},
    resets=1,
    schema="v1",
    polls=9,
    dropped={"engines": 3},
    dips=4,
)
ROUTE = RouteState(
    route="chat",
    target="vllm",
    model_name="llama",
    method="eagle3",
    schema="v1",
    spec_present=True,
    configured_k=2,
    expects_speculation=True,
    baseline_itl_p99_seconds=0.05,
    mirrored={"drafts": 10.0, "draft_tokens": 20.0, "accepted": 15.0, "gen": 50.0},
    positions=((0, 9.0), (1, 6.0)),
    itl_buckets=((0.01, 3.0), (float("inf"), 5.0)),
    itl_sum=0.2,
    itl_count=5.0,
    evaluations=(),
)
FLEET = FleetState(
    replica_labels=("namespace", "pod"),
    t=100.0,
    up=True,
    last_success=100.0,
    query_duration=0.5,
    queries=6,
    queries_per_poll=3,
    errors={"timeout": 1},
    stale_replicas=0,
    stale_evaluations=0,
    routes=(),
    fleet=(FleetRow("chat", "5m", 2, {"keep": 2}, 0.6, 0.1, 100.0),),
)


BEFORE = WindowSummary(
    t=90.0,
    window="5m",
    span_seconds=300.0,
    method="eagle3",
    draft_length=2.0,
    acceptance_rate=0.75,
    position_rates=(0.9, 0.6),
    batch_size=8.0,
    tokens_per_step=2.5,
    step_time_seconds=0.02,
    itl_p99_seconds=None,
    itl_per_token_seconds=0.008,
    tokens_per_engine_step=20.0,
    drafts=1000.0,
)
AFTER = replace(BEFORE, t=200.0, itl_per_token_seconds=0.01)


def _served_lines(view) -> list[str]:
    """The view's /metrics lines as specwatch serves them, which must be the bytes prometheus_client
    renders from the same families, in the text format and in OpenMetrics."""
    families = list(SpecwatchCollector(lambda: view).collect())
    text = metrics_text.render_text(families)
    assert text == plain_text(families)
    assert metrics_text.render_openmetrics(families) == plain_openmetrics(families)
    return text.decode().splitlines()


def _sidecar_lines(state: State) -> list[str]:
    return _served_lines(view_of(state))


def _fleet_lines(state: FleetState) -> list[str]:
    return _served_lines(view_of(fleet=state))


def _state(target=TARGET, route=ROUTE) -> State:
    return State(t=100.0, targets=(target,), routes=(route,), evaluated=True)


def _replica_route(route=ROUTE) -> ReplicaRouteState:
    from support.builders import route_evaluation

    return ReplicaRouteState(
        (("namespace", "ns"), ("pod", "p-0")), "chat", "llama", "eagle3", False, (route_evaluation(),)
    )


# (what, state, lines that must be there, names that must have no sample)
SIDECAR_CASES = [
    (
        "a healthy target",
        _state(),
        [
            'specwatch_target_up{target="vllm"} 1.0',
            'specwatch_scrape_duration_seconds{target="vllm"} 0.25',
            'specwatch_scrape_errors_total{reason="timeout",target="vllm"} 2.0',
            'specwatch_payload_dropped_total{limit="engines",target="vllm"} 3.0',
            'specwatch_target_restarts_total{target="vllm"} 1.0',
            'specwatch_target_dips_total{target="vllm"} 4.0',
            'specwatch_last_scrape_success_timestamp_seconds{target="vllm"} 1.7e+09',
        ],
        [],
    ),
    (
        "a target never polled",
        _state(target=replace(TARGET, up=None, scrape_duration=None, last_success=None)),
        ['specwatch_target_restarts_total{target="vllm"} 1.0'],
        ["specwatch_target_up", "specwatch_scrape_duration_seconds", "specwatch_last_scrape_success_timestamp_seconds"],
    ),
    (
        "a route of a target that is up",
        _state(),
        [
            'specwatch_route_info{engine="vllm",method="eagle3",model_name="llama",route="chat",schema="v1",target="vllm"} 1.0',
            'specwatch_route_expects_speculation{route="chat",target="vllm"} 1.0',
            'specwatch_baseline_itl_p99_seconds{route="chat",target="vllm"} 0.05',
            'specwatch_drafts_total{route="chat",target="vllm"} 10.0',
            'specwatch_draft_tokens_total{route="chat",target="vllm"} 20.0',
            'specwatch_accepted_tokens_total{route="chat",target="vllm"} 15.0',
            'specwatch_generation_tokens_total{route="chat",target="vllm"} 50.0',
            'specwatch_accepted_tokens_by_position_total{position="1",route="chat",target="vllm"} 6.0',
            'specwatch_itl_seconds_bucket{le="0.01",route="chat",target="vllm"} 3.0',
            'specwatch_itl_seconds_bucket{le="+Inf",route="chat",target="vllm"} 5.0',
            'specwatch_itl_seconds_sum{route="chat",target="vllm"} 0.2',
        ],
        [],
    ),
    (
        "a route's learned curve and the window a change would be graded against",
        _state(route=replace(ROUTE, curve_knots=((8.0, 0.01), (512.0, 0.03)), before_window=BEFORE)),
        [
            'specwatch_step_time_curve_seconds{route="chat",target="vllm",tokens="8"} 0.01',
            'specwatch_step_time_curve_seconds{route="chat",target="vllm",tokens="512"} 0.03',
            'specwatch_advice_before_acceptance_ratio{method="eagle3",route="chat",target="vllm"} 0.75',
            'specwatch_advice_before_position_acceptance_ratio{position="1",route="chat",target="vllm"} 0.6',
        ],
        [],
    ),
    (
        "a route of a target that is down keeps only its metadata",
        _state(target=replace(TARGET, up=False)),
        [
            'specwatch_target_up{target="vllm"} 0.0',
            'specwatch_route_info{engine="vllm",method="eagle3",model_name="llama",route="chat",schema="v1",target="vllm"} 1.0',
            'specwatch_baseline_itl_p99_seconds{route="chat",target="vllm"} 0.05',
        ],
        ["specwatch_drafts_total", "specwatch_generation_tokens_total", "specwatch_itl_seconds_bucket"],
    ),
    (
        "a route without speculation exports no spec-decode counter",
        _state(route=replace(ROUTE, spec_present=False)),
        ['specwatch_generation_tokens_total{route="chat",target="vllm"} 50.0'],
        ["specwatch_drafts_total", "specwatch_accepted_tokens_by_position_total"],
    ),
]


@pytest.mark.parametrize(("what", "state", "present", "absent"), SIDECAR_CASES, ids=[c[0] for c in SIDECAR_CASES])
def test_a_sidecar_state_becomes_these_exposition_lines(what, state, present, absent):
    lines = _sidecar_lines(state)
    assert [line for line in present if line not in lines] == []
    assert [line for line in lines if line.split("{")[0].split(" ")[0] in absent] == []


FLEET_CASES = [
    (
        "the query source's health",
        FLEET,
        [
            "specwatch_prometheus_up 1.0",
            "specwatch_prometheus_queries_total 6.0",
            "specwatch_prometheus_queries_per_poll 3.0",
            'specwatch_prometheus_query_errors_total{reason="timeout"} 1.0',
            'specwatch_prometheus_query_errors_total{reason="connect"} 0.0',
            "specwatch_prometheus_query_duration_seconds 0.5",
            "specwatch_stale_replicas 0.0",
        ],
        ["specwatch_prometheus_answer_series"],
    ),
    (
        "a fleet row",
        FLEET,
        [
            'specwatch_fleet_acceptance_ratio{route="chat",window="5m"} 0.6',
            'specwatch_fleet_losing_tokens_ratio{route="chat",window="5m"} 0.1',
            'specwatch_fleet_replicas{route="chat",verdict="keep",window="5m"} 2.0',
        ],
        [],
    ),
    (
        "a replica carries its labels and instance",
        replace(FLEET, routes=(_replica_route(),), baselines={"chat": 0.05}),
        [
            'specwatch_route_info{engine="vllm",instance="ns/p-0",method="eagle3",model_name="llama",namespace="ns",pod="p-0",'
            'route="chat",schema="v1",target="ns/p-0"} 1.0',
            'specwatch_baseline_itl_p99_seconds{instance="ns/p-0",namespace="ns",pod="p-0",route="chat",'
            'target="ns/p-0"} 0.05',
        ],
        [],
    ),
    (
        "a rollout graded across replicas and what each route's verdicts rest on",
        replace(
            FLEET,
            gradings={("chat", ()): Grading(changed_at=100.0, before=BEFORE, after=AFTER, predicted_gain_ratio=0.9)},
            cost_models=(RouteBaseline("chat", "learned", "canary", 1, 4.0, 2.0),),
        ),
        [
            'specwatch_advice_predicted_gain_ratio{route="chat"} 0.9',
            'specwatch_advice_measured_gain_ratio{route="chat"} 0.8',
            'specwatch_fleet_cost_model_info{baseline="canary",route="chat",source="learned"} 1.0',
        ],
        [],
    ),
    (
        "a rollout graded per deployment carries the deployment's labels",
        replace(
            FLEET,
            deployment_labels=("namespace",),
            gradings={
                ("chat", (("namespace", "team-a"),)): Grading(changed_at=100.0, before=BEFORE, after=AFTER),
                ("chat", (("namespace", "team-b"),)): Grading(
                    changed_at=100.0, before=BEFORE, predicted_gain_ratio=0.9
                ),
            },
        ),
        [
            'specwatch_advice_measured_gain_ratio{namespace="team-a",route="chat"} 0.8',
            'specwatch_advice_predicted_gain_ratio{namespace="team-b",route="chat"} 0.9',
            'specwatch_fleet_acceptance_ratio{route="chat",window="5m"} 0.6',
        ],
        [],
    ),
    (
        "a failed poll serves no replica",
        replace(FLEET, up=False, routes=(_replica_route(),)),
        ["specwatch_prometheus_up 0.0"],
        ["specwatch_route_info", "specwatch_acceptance_ratio", "specwatch_verdict"],
    ),
]


@pytest.mark.parametrize(("what", "state", "present", "absent"), FLEET_CASES, ids=[c[0] for c in FLEET_CASES])
def test_a_fleet_state_becomes_these_exposition_lines(what, state, present, absent):
    lines = _fleet_lines(state)
    assert [line for line in present if line not in lines] == []
    assert [line for line in lines if line.split("{")[0].split(" ")[0] in absent] == []


def _declared(lines: list[str]) -> dict[str, tuple[str, str]]:
    """HELP and TYPE of every family in an exposition."""
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", "\n".join(lines), re.M))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", "\n".join(lines), re.M))
    return {name: (helps[name], types[name]) for name in helps}


def test_each_mode_exports_its_families_of_the_table_in_table_order_with_the_tables_help_and_type():
    fleet_state = replace(FLEET, routes=(_replica_route(),))
    for mode, lines in (("sidecar", _sidecar_lines(_state())), ("fleet", _fleet_lines(fleet_state))):
        declared = _declared(lines)
        wanted = {
            # the exposition declares a counter under its sample name
            (f.name + "_total" if f.type == "counter" else f.name): (f.help, f.type)
            for f in contract.exported(mode)
            if f.name not in contract.SERVICE_FAMILIES | contract.ONLY_WITH_SAMPLES
        }
        assert list(declared) == list(wanted), mode
        assert declared == wanted, mode


def test_a_family_of_both_modes_has_one_help_in_both():
    sidecar = _declared(_sidecar_lines(_state()))
    fleet = _declared(_fleet_lines(FLEET))
    shared = sidecar.keys() & fleet.keys()
    assert {"specwatch_route_info", "specwatch_acceptance_ratio", "specwatch_build_info"} <= shared
    assert {name: sidecar[name] for name in shared} == {name: fleet[name] for name in shared}


def test_the_documented_metric_list_is_generated_from_the_table():
    readme = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    for family in contract.FAMILIES:
        assert f"| `{family.sample_names()[0]}`" in readme


def _contract_section() -> str:
    architecture = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return architecture[architecture.index("## 4. Metric contract") : architecture.index("## 5.")]


def test_every_metric_name_the_architecture_page_lists_is_a_family_of_the_table():
    known = {name for family in contract.FAMILIES for name in (family.name, *family.sample_names())}
    named = set(re.findall(r"`(specwatch_[a-z0-9_]+)", _contract_section()))
    assert named and named - known == set()


def test_the_architecture_page_gives_each_family_the_tables_type():
    rows = re.findall(r"^\| `(specwatch_[a-z0-9_]+)` \| (gauge|counter|histogram)\b", _contract_section(), re.M)
    by_sample = {name: family for family in contract.FAMILIES for name in family.sample_names()}
    assert rows
    assert [(name, kind) for name, kind in rows if by_sample[name].type != kind] == []


def test_replica_labels_go_only_to_what_a_replica_exports():
    assert contract.BY_NAME["specwatch_acceptance_ratio"].labels(["pod"]) == ["route", "target", "window", "pod"]
    assert contract.BY_NAME["specwatch_verdict"].labels(["pod"]) == ["route", "target", "window", "pod", "verdict"]
    assert contract.BY_NAME["specwatch_fleet_replicas"].labels(["pod"]) == ["route", "window", "verdict"]
    assert contract.BY_NAME["specwatch_prometheus_up"].labels(["pod"]) == []


def test_deployment_labels_go_only_to_what_is_kept_per_deployment():
    fleet_gain = next(
        f for f in contract.FAMILIES if f.name == "specwatch_advice_measured_gain_ratio" and "fleet" in f.modes
    )
    assert fleet_gain.labels(["namespace", "pod"], ["namespace"]) == ["route", "namespace"]
    assert fleet_gain.labels(["namespace", "pod"]) == ["route"]
    assert contract.BY_NAME["specwatch_advice_measured_gain_ratio"].labels(deployment=["namespace"]) == [
        "route",
        "target",
    ]
    assert contract.BY_NAME["specwatch_fleet_replicas"].labels(deployment=["namespace"]) == [
        "route",
        "window",
        "verdict",
    ]


@pytest.mark.parametrize(
    "row",
    [
        "drafts_seen  gauges   experimental sidecar route,target -               | Misspelt type.",
        "drafts_seen  gauge    beta         sidecar route,target -               | Unknown stability.",
        "drafts_seen  gauge    experimental pods    route,target -               | Unknown mode.",
        "drafts_seen  gauge    experimental both    route,target acceptance_rat  | Not an evaluation value.",
    ],
)
def test_a_table_row_with_an_unknown_type_stability_mode_or_value_is_refused(row):
    with pytest.raises(ValueError, match="drafts_seen"):
        contract._family(row)


def test_the_acceptance_basis_family_is_declared_only_for_a_window_that_is_not_a_counter_ratio():
    ratio = route_evaluation()
    gauges = route_evaluation(replace(window_stats(), acceptance_basis=GAUGE_MEAN))
    assert "# TYPE specwatch_acceptance_basis_info gauge" not in _sidecar_lines(
        _state(route=replace(ROUTE, evaluations=(ratio,)))
    )
    lines = _sidecar_lines(_state(route=replace(ROUTE, evaluations=(gauges,))))
    assert (
        'specwatch_acceptance_basis_info{basis="engine_gauge_mean",route="chat",target="vllm",window="1m"} 1.0' in lines
    )


def test_the_readme_stays_a_five_minute_read():
    """The README answers what specwatch does, its two commands, what the output means and where
    the rest is; the references live in docs/ (the metric list and the config are generated there)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 12 * 1024
    assert "specwatch demo" in readme and "bash .ci/run" in readme
    assert "<!-- metrics:begin -->" not in readme and "<!-- config:begin -->" not in readme
    for linked in ("docs/configuration.md", "docs/metrics.md", "docs/runbook.md", "docs/kubernetes.md"):
        assert f"]({linked})" in readme and (REPO / linked).is_file()


def test_each_before_window_quantity_is_a_family_of_its_own_in_the_table():
    assert set(contract.BEFORE_WINDOW) == set(SUMMARY_QUANTITIES)
    families = [contract.BY_NAME[name] for name in (*contract.BEFORE_WINDOW.values(), contract.BEFORE_POSITIONS)]
    assert len(set(contract.BEFORE_WINDOW.values())) == len(SUMMARY_QUANTITIES)
    assert [f.name for f in families if f.modes != {"sidecar"} or f.type != "gauge"] == []


PROMTOOL_CASES = [
    *(("sidecar: " + what, _sidecar_lines(state)) for what, state, _, _ in SIDECAR_CASES),
    *(("fleet: " + what, _fleet_lines(state)) for what, state, _, _ in FLEET_CASES),
    ("fleet: replicas evaluated", _fleet_lines(replace(FLEET, routes=(_replica_route(),)))),
]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
@pytest.mark.parametrize(("what", "lines"), PROMTOOL_CASES, ids=[c[0] for c in PROMTOOL_CASES])
def test_each_modes_exposition_passes_promtool_check_metrics(what, lines):
    body = "\n".join(lines) + "\n"
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30, check=False
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
