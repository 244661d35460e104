"""The lesson's CLIs: breakeven, simulate, plan, memory. Golden outputs live in tests/golden/.

Regenerate after an intended model change with SPECWATCH_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specwatch import costmodel as cmod
from specwatch import lesson
from specwatch.config import Config, DecisionConfig, DraftConfig, ModelConfig, from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.config.result import EngineConfig
from specwatch.lesson.options import TargetBasis
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict import decide
from specwatch.windows.derive import WindowStats

GOLDEN = Path(__file__).parents[2] / "golden"
UPDATE = os.environ.get("SPECWATCH_UPDATE_GOLDEN") == "1"


def run(argv: list[str]) -> tuple[int, str]:
    """A lesson command through specwatch's parser (with the sidecar's answer for breakeven's rows,
    cli/breakeven.py): a bad value is SystemExit(2) and two lines."""
    from specwatch.cli import breakeven
    from specwatch.cli.args import CliParser, subparser_for

    parser = CliParser(prog="specwatch")
    subparsers = parser.add_subparsers(dest="command", required=True)
    lesson.add_parsers(subparsers)
    breakeven.add_parsers(subparsers)
    args = parser.parse_args(argv)
    out = io.StringIO()
    try:
        rc = args.func(args, out=out)
    except argparse.ArgumentTypeError as exc:
        subparser_for(parser, args.command).error(str(exc))
    return rc, out.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with SPECWATCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from the golden file"


# ------------------------------------------------------------------------------------------
# breakeven
# ------------------------------------------------------------------------------------------


def test_breakeven_json_matches_golden_for_the_default_target_the_sidecars():
    rc, out = run(["breakeven", "--k", "3", "--batch", "1,8,64,256", "--alpha", "0.6", "--format", "json"])
    assert rc == 0
    check_golden("breakeven_default.json", out)
    doc = json.loads(out)
    assert doc["assumptions"]["model"] == "llama-3.1-8b" and doc["assumptions"]["tensor_parallel"] == 1
    assert doc["target"]["engine_prior"] == "vllm-v1" and doc["target"]["setup_assumed"] is True
    rows = doc["rows"]
    assert [r["batch"] for r in rows] == [1, 8, 64, 256]
    assert set(rows[0]) == {"batch", "k", "breakeven_acceptance_rate", "expected_speedup"} | {
        "epsilon",
        "epsilon_verify",
        "epsilon_drafting",
        "epsilon_fixed",
    } | {"drafts", "verdict", "expected_speedup_lower", "expected_speedup_upper", "loss_probability"}
    for r in rows:  # the lesson's formula, epsilon priced at the batch
        assert r["breakeven_acceptance_rate"] == pytest.approx(r["epsilon"] / r["k"], abs=2e-4)


def test_breakeven_json_matches_golden_for_70b_fp8_tp4_from_a_config_file(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(cmod.MODEL_HF_CONFIGS["llama-3.3-70b"]))
    rc, out = run(
        [
            "breakeven",
            "--hardware",
            "h100-sxm",
            "--model-config",
            str(cfg),
            "--dtype",
            "fp8",
            "--tp",
            "4",
            "--method",
            "eagle3",
            "--k",
            "5",
            "--batch",
            "1,64,256",
            "--context",
            "1024",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    check_golden("breakeven_70b_fp8_tp4.json", out)
    rows = json.loads(out)["rows"]
    assert all(r["expected_speedup"] is None for r in rows)  # no --alpha given
    # The lesson's 0.45-0.55 band at 256 concurrent is the plain roofline's (tests/unit/costmodel/test_costmodel.py);
    # with the fixed costs fitted on published speedups the line sits higher (docs/costmodel.md).
    rates = [r["breakeven_acceptance_rate"] for r in rows]
    assert rates == sorted(rates) and rates[-1] >= 0.45


def sidecar_window(alpha: float, batch: float) -> WindowStats:
    """A sidecar's 1m window at K=3 with enough drafts to decide: what `breakeven --k 3` is compared with."""
    return WindowStats(
        route="r",
        window="1m",
        t=0.0,
        samples=10,
        span_seconds=60.0,
        spec_present=True,
        drafts=5000.0,
        acceptance_rate=alpha,
        draft_length=3.0,
        configured_k=3,
        position_rates=cmod.position_rates_from_alpha(alpha, 3),
        batch_size=batch,
    )


def test_breakeven_cli_and_live_sidecar_assessment_give_the_same_numbers():
    _rc, out = run(
        [
            "breakeven",
            *("--model", "llama-3.1-8b", "--dtype", "bf16", "--tp", "1"),  # the sidecar's own default target
            *("--k", "3", "--batch", "48", "--alpha", "0.55", "--context", "2048", "--format", "json"),
        ]
    )
    row = json.loads(out)["rows"][0]
    # The sidecar path: config -> cost_model_from_config -> decide.assess on a window.
    # The calculators charge vLLM V1's fixed costs unless --engine says otherwise: `engine: {name: vllm}`.
    cm = cost_model_from_config(
        Config(model=ModelConfig(context_tokens=2048), draft=DraftConfig(k=3), engine=EngineConfig(name="vllm"))
    )
    stats = sidecar_window(alpha=0.55, batch=48.0)
    a = decide.assess(cm, stats, DecisionConfig(min_drafts=500, margin=0.02), "auto", None)
    assert a.breakeven_acceptance_rate is not None and a.expected_speedup is not None
    assert row["breakeven_acceptance_rate"] == round(a.breakeven_acceptance_rate, 4)
    assert row["expected_speedup"] == round(a.expected_speedup, 4)


def test_breakeven_raw_bandwidth_and_flops_and_draft_cost_flags():
    _rc, out = run(
        [
            "breakeven",
            "--bandwidth",
            "2e12",
            "--flops",
            "4e14",
            "--params",
            "8e9",
            "--draft-cost",
            "0.05",
            "--k",
            "4",
            "--batch",
            "1",
            "--format",
            "json",
        ]
    )
    assert json.loads(out)["rows"][0]["breakeven_acceptance_rate"] == pytest.approx(0.05, abs=1e-4)


def test_breakeven_table_has_a_row_per_batch_and_k():
    rc, out = run(["breakeven", "--k", "1,3", "--batch", "1,256", "--alpha", "0.5"])
    assert rc == 0
    rows = [ln for ln in out.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert len(rows) == 4 and out.count("x") >= 4


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["breakeven", "--batch", "1"], id="without-k"),
        pytest.param(["breakeven", "--k", "3", "--batch", "0"], id="with-batch-0"),
    ],
)
def test_breakeven_requires_k_and_a_batch_of_at_least_1(argv):
    with pytest.raises(SystemExit):
        run(argv)


# ------------------------------------------------------------------------------------------
# simulate
# ------------------------------------------------------------------------------------------

SIM = [
    "simulate",
    "--alphas",
    "0.4,0.7",
    "--k",
    "5",
    "--batch",
    "1,256",
    "--tokens",
    "64",
    "--requests",
    "8",
    "--seed",
    "7",
    "--format",
    "json",
]


def test_simulate_json_matches_golden_for_a_seeded_small_grid():
    rc, out = run(SIM)
    assert rc == 0
    check_golden("simulate_small.json", out)


def test_simulate_is_reproducible_with_a_seed_and_changes_with_another():
    assert run(SIM)[1] == run(SIM)[1]
    other = SIM[:-4] + ["--seed", "8", "--format", "json"]
    assert run(other)[1] != run(SIM)[1]


def test_simulated_speedup_and_alpha_track_the_model_over_many_requests():
    _rc, out = run(
        [
            "simulate",
            "--alphas",
            "0.3,0.7",
            "--k",
            "3",
            "--batch",
            "1,64",
            "--tokens",
            "200",
            "--requests",
            "40",
            "--format",
            "json",
        ]
    )
    for g in json.loads(out)["grid"]:
        assert g["measured_alpha"] == pytest.approx(g["alpha"], abs=0.04)
        assert g["measured_speedup"] == pytest.approx(g["expected_speedup"], rel=0.06)


def test_simulate_answers_the_lesson_exercises():
    # The lesson's own world: Llama-3.3-70B fp8 on 4 GPUs, with the generic fixed costs.
    lesson_target = ["--model", "llama-3.3-70b", "--dtype", "fp8", "--tp", "4", "--engine", "generic"]
    rep = json.loads(run(["simulate", "--format", "json", "--requests", "4", "--tokens", "32", *lesson_target])[1])
    a = rep["answers"]
    # K=5 with overhead 0.15 at batch 1: 2x needs (2*1.15-1)/5 = 0.26, 3x needs 0.49.
    b1 = a["alpha_for_speedup_at_k5"][0]
    assert b1["batch"] == 1 and b1["alpha_for_2x"] == pytest.approx(0.26) and b1["alpha_for_3x"] == pytest.approx(0.49)
    sens = {r["overhead"]: r for r in a["overhead_sensitivity_k5"]}
    assert sens[0.15]["breakeven"] == pytest.approx(0.03)
    assert sens[0.5]["alpha_for_2x"] > sens[0.05]["alpha_for_2x"]
    bt = a["blended_traffic"]
    assert bt["blended_alpha"] == pytest.approx(0.61)
    by_batch = {r["batch"]: r for r in bt["per_batch"]}
    assert by_batch[1]["net_positive"] and by_batch[1]["routes_below_breakeven"] == []
    assert "code" in by_batch[256]["routes_below_breakeven"]  # 0.4 < ~0.5 at 256 concurrent
    dg = a["itl_diagnosis"]
    assert dg["implied_tau"] == pytest.approx(1.15 / 0.75, abs=1e-4)
    assert dg["implied_alpha"] == pytest.approx((1.15 / 0.75 - 1) / 5, abs=1e-4)


def test_simulation_shows_mean_itl_falling_while_p99_step_itl_rises():
    rep = json.loads(
        run(
            [
                "simulate",
                "--alphas",
                "0.5",
                "--k",
                "5",
                "--batch",
                "1",
                "--tokens",
                "128",
                "--requests",
                "16",
                "--format",
                "json",
            ]
        )[1]
    )
    g = rep["grid"][0]
    assert g["itl_mean_per_token_on"] < g["itl_mean_per_token_off"]
    assert g["itl_p99_on"] > g["itl_p99_off"]


# ------------------------------------------------------------------------------------------
# plan and memory
# ------------------------------------------------------------------------------------------


def test_plan_markdown_matches_golden_and_has_every_stage():
    rc, out = run(
        [
            "plan",
            "--model",
            "llama-3.3-70b",
            "--hardware",
            "h100-sxm",
            "--dtype",
            "fp8",
            "--tp",
            "4",
            "--traffic",
            "chat=0.7:0.7,code=0.3:0.4",
            "--concurrency",
            "64",
        ]
    )
    assert rc == 0
    check_golden("plan_70b_h100_c64.md", out)
    for heading in (
        "baseline",
        "enable speculation",
        "measure alpha per route",
        "gate at break-even",
        "watch P99 ITL",
        "Rollback trigger",
    ):
        assert heading in out
    config = json.loads(out.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert config["method"] == "eagle3" and "disable_by_batch_size" not in config


def test_plan_at_high_concurrency_flags_the_code_route_below_break_even(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(cmod.MODEL_HF_CONFIGS["llama-3.3-70b"]))
    _rc, out = run(
        [
            "plan",
            "--model-config",
            str(cfg),
            "--hardware",
            "h100-sxm",
            "--dtype",
            "fp8",
            "--tp",
            "4",
            "--context",
            "1024",
            "--k",
            "5",
            "--traffic",
            "chat=0.7:0.7,code=0.3:0.4",
            "--concurrency",
            "256",
        ]
    )
    code_row = next(ln for ln in out.splitlines() if ln.startswith("| code"))
    assert code_row.rstrip().endswith("| disable |")


def test_memory_json_matches_golden_eagle3_head_vs_llama_32_1b_for_llama_33_70b():
    rc, out = run(
        [
            "memory",
            "--model",
            "llama-3.3-70b",
            "--dtype",
            "fp8",
            "--tp",
            "4",
            "--concurrency",
            "64",
            "--context",
            "2048",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    check_golden("memory_70b_eagle3_vs_1b.json", out)
    rep = json.loads(out)
    head, dm = rep["components"]["eagle3_head"], rep["components"]["draft_model"]
    # One-layer head: 1/80 of the target's KV per token; Llama-3.2-1B: 16 layers × 8 × 64 × 2 × 2 B.
    assert head["kv_bytes_per_token"] == 327680 // 80 and dm["kv_bytes_per_token"] == 32768
    assert head["total_gb_at_load"] < dm["total_gb_at_load"]
    assert rep["kv_capacity"]["eagle3_head"]["kv_capacity_lost"] < rep["kv_capacity"]["draft_model"]["kv_capacity_lost"]


def test_missing_model_config_file_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run(["breakeven", "--model-config", str(tmp_path / "nope.json"), "--k", "3", "--batch", "1"])
    assert exc.value.code == 2 and "--model-config" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# The report functions take explicit parameters; the commands share one set of target options
# ------------------------------------------------------------------------------------------


def test_plan_and_memory_reports_called_directly_match_the_commands():
    cm = cmod.build_cost_model(draft_method="eagle3", engine="vllm", setup_assumed=True)
    assumed = ("hardware", "model", "dtype", "tensor_parallel", "engine_prior")
    basis = TargetBasis("h100-sxm", "llama-3.1-8b", "bf16", 1, 2048, "vllm-v1", assumed, setup_assumed=True)
    mix = [("chat", 0.7, 0.7), ("code", 0.3, 0.4)]
    _, plan_out = run(["plan", "--traffic", "chat=0.7:0.7,code=0.3:0.4"])
    rollout = lesson.Rollout(method="eagle3", k=3, concurrency=64, traffic=mix)
    assert lesson.plan_markdown(cm, rollout, basis) == plan_out
    _, memory_out = run(["memory", "--format", "json"])
    rep = lesson.memory_report(
        cm,
        cmod.MODEL_PRESETS["llama-3.2-1b"],
        draft_dtype="bf16",
        draft_vocab=32000,
        concurrency=64,
        context_tokens=2048,
        gpu_memory_utilization=0.9,
        basis=basis,
    )
    assert json.loads(memory_out) == rep


@pytest.mark.parametrize(
    "command, numbers",
    [
        (["breakeven", "--k", "3", "--batch", "1,64", "--format", "json"], lambda rep: rep["rows"]),
        (["memory", "--format", "json"], lambda rep: rep["components"]),
    ],
)
def test_every_command_accepts_a_preset_a_config_json_or_a_parameter_count_for_the_target(command, numbers, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(cmod.MODEL_HF_CONFIGS["qwen2.5-7b"]))
    by_preset, by_file, by_params = (
        numbers(json.loads(run([*command, *target])[1]))
        for target in (["--model", "qwen2.5-7b"], ["--model-config", str(cfg)], ["--params", "7.6e9"])
    )
    assert by_preset == by_file != by_params


# ------------------------------------------------------------------------------------------
# calculator bugs found trying them as a new user (regressions)
# ------------------------------------------------------------------------------------------

PROFILE_YAML = """\
source: spec-off steps measured at concurrency 1, 4, 16 (first batch measured as 0.99)
points:
  - {tokens: 0.99, seconds: 0.004136}
  - {tokens: 2.6251, seconds: 0.004656}
  - {tokens: 10.8315, seconds: 0.006739}
"""


@pytest.mark.parametrize("method", ["eagle3", "eagle", "medusa"])
def test_a_k_row_of_breakeven_is_the_same_whichever_other_k_values_are_asked_for(method):
    _rc, alone = run(
        ["breakeven", "--method", method, "--k", "3", "--batch", "1,64", "--alpha", "0.6", "--format", "json"]
    )
    _rc, with_five = run(
        ["breakeven", "--method", method, "--k", "3,5", "--batch", "1,64", "--alpha", "0.6", "--format", "json"]
    )
    assert json.loads(alone)["rows"] == [r for r in json.loads(with_five)["rows"] if r["k"] == 3]


def test_simulate_rows_for_a_k_do_not_depend_on_the_other_k_values():
    base = [
        "simulate",
        "--method",
        "eagle3",
        "--alphas",
        "0.6",
        "--batch",
        "1",
        "--tokens",
        "16",
        "--requests",
        "2",
        "--seed",
        "1",
        "--format",
        "json",
    ]
    _rc, alone = run([*base, "--k", "3"])
    _rc, both = run([*base, "--k", "3,5"])
    row = json.loads(alone)["grid"][0]
    other = next(r for r in json.loads(both)["grid"] if r["k"] == 3)
    assert row["breakeven_acceptance_rate"] == other["breakeven_acceptance_rate"]
    assert row["expected_speedup"] == other["expected_speedup"]


@pytest.mark.parametrize(
    "argv",
    [
        ["breakeven", "--k", "3", "--batch", "1", "--alpha", "1.5"],
        ["breakeven", "--k", "3", "--batch", "1", "--alpha", "-0.1"],
        ["simulate", "--alphas", "0.5,1.2"],
    ],
)
def test_an_acceptance_rate_outside_zero_to_one_is_refused_with_one_line_and_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        run(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "must be in [0, 1]" in err[0] and "alpha" in err[0]  # the error, then the hint


def test_simulate_text_prints_no_python_none_and_rates_with_three_decimals():
    _rc, out = run(["simulate", "--alphas", "0.4", "--k", "5", "--batch", "1,256", "--tokens", "16", "--requests", "2"])
    assert "None" not in out
    assert "unreachable" in out  # 3x at batch 256 cannot be reached with alpha <= 1
    answers = out[out.index("## alpha needed") :]
    rates = re.findall(r"(?:alpha|break-even|at) (\d+\.\d+)", answers)
    assert rates and all(len(r.split(".")[1]) == 3 for r in rates)


def test_a_profile_point_measured_below_one_token_is_read_as_one_request():
    profile = cmod.parse_profile(yaml.safe_load(PROFILE_YAML))
    assert profile.points[0] == (1.0, 0.004136)
    with pytest.raises(ValueError, match=r"profile.points\[0\].tokens: must be a number > 0"):
        cmod.parse_profile({"points": [[0, 0.004], [2, 0.005]]})
    with pytest.raises(ValueError, match="strictly increasing"):
        cmod.parse_profile({"points": [[0.5, 0.004], [0.99, 0.004], [2, 0.005]]})


def test_breakeven_with_the_sidecars_profile_gives_the_sidecars_numbers(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE_YAML)
    _rc, out = run(
        [
            "breakeven",
            "--method",
            "ngram",
            "--k",
            "3",
            "--batch",
            "4",
            "--alpha",
            "0.7",
            "--profile",
            str(path),
            "--format",
            "json",
        ]
    )
    row = json.loads(out)["rows"][0]
    config = from_mapping(
        {"profile": str(path), "draft": {"method": "ngram", "k": 3}, "engine": {"name": "vllm"}}, environ={}
    )
    stats = sidecar_window(alpha=0.7, batch=4.0)
    a = decide.assess(Pipeline(config).cost_model, stats, DecisionConfig(), "ngram", None)
    assert row["breakeven_acceptance_rate"] == round(a.breakeven_acceptance_rate, 4)
    assert row["expected_speedup"] == round(a.expected_speedup, 4)


def test_run_on_a_busy_listen_port_exits_2_with_one_line_naming_listen():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "specwatch.cli",
                "run",
                "--listen",
                f"127.0.0.1:{port}",
                "--target",
                "http://127.0.0.1:9/metrics",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "--listen" in lines[0] and "Traceback" not in proc.stderr  # the error, the hint
