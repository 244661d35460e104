"""`specwatch breakeven --format json` answers as the sidecar would: each row's verdict, speedup
interval and loss probability are the sidecar's first evaluation of a window at that batch, K,
alpha and number of drafts (cli/breakeven.py -> verdict/point.py -> decide.assess).

The proof runs the sidecar itself: two polls of a vLLM V1 /metrics five minutes apart (a real
vLLM 0.32 payload at idle, its counters moved by the window's drafts) through the Pipeline."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from specwatch import costmodel as cmod
from specwatch.cli.main import main
from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.evaluation import RouteEvaluation

IDLE = (Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu" / "ngram-00-idle.prom").read_text()
K = 4  # the fixture's server ran K=4: four `position` labels
WINDOW = 300.0


def breakeven(*argv: str) -> dict[str, object]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["breakeven", *argv, "--format", "json"]) == 0
    doc: dict[str, object] = json.loads(out.getvalue())
    return doc


def _set(text: str, name: str, value: float, labels: str = "") -> str:
    """Every sample of ``name`` (with ``labels`` among its labels) set to ``value``."""
    pattern = re.compile(rf"^({re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}}) \S+$", re.MULTILINE)
    moved, count = pattern.subn(lambda m: f"{m.group(1)} {value!r}", text)
    assert count, name
    return moved


def busy(*, batch: int, alpha: float, drafts: float) -> str:
    """The idle payload after ``drafts`` drafts of K tokens at ``batch`` requests a step, every
    request-step drafting, acceptances per position i.i.d. at ``alpha``."""
    rates = cmod.position_rates_from_alpha(alpha, K)
    accepted = [drafts * p for p in rates]
    steps = drafts / batch
    text = _set(IDLE, "vllm:spec_decode_num_drafts_total", drafts)
    text = _set(text, "vllm:spec_decode_num_draft_tokens_total", drafts * K)
    text = _set(text, "vllm:spec_decode_num_accepted_tokens_total", sum(accepted))
    for i, count in enumerate(accepted):
        text = _set(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", count, f'position="{i}"')
    text = _set(text, "vllm:generation_tokens_total", drafts + sum(accepted))
    text = _set(text, "vllm:num_requests_running", float(batch))
    text = _set(text, "vllm:iteration_tokens_total_bucket", steps)
    text = _set(text, "vllm:iteration_tokens_total_count", steps)
    text = _set(text, "vllm:iteration_tokens_total_sum", steps * batch)
    text = _set(text, "vllm:inter_token_latency_seconds_bucket", drafts)  # every step below 10 ms
    text = _set(text, "vllm:inter_token_latency_seconds_count", drafts)
    return _set(text, "vllm:inter_token_latency_seconds_sum", drafts * 0.008)


def sidecar_first_evaluation(config: dict[str, object], *, batch: int, alpha: float, drafts: float) -> RouteEvaluation:
    pipeline = Pipeline(from_mapping({"windows": ["5m"], **config}, environ={}))
    pipeline.ingest("vllm", 1000.0, IDLE)
    pipeline.ingest("vllm", 1000.0 + WINDOW, busy(batch=batch, alpha=alpha, drafts=drafts))
    (evaluation,) = pipeline.evaluate(1000.0 + WINDOW)
    return evaluation


#: (breakeven's flags, the sidecar config that states the same, batch, alpha, drafts)
CASES = {
    "defaults-assumed-setup": ([], {"engine": {"name": "vllm"}}, 8, 0.6, 8000.0),
    "8b-stated-keep": (
        ["--model", "llama-3.1-8b"],
        {"model": {"preset": "llama-3.1-8b"}, "engine": {"name": "vllm"}},
        8,
        0.6,
        8000.0,
    ),
    "8b-stated-low-alpha": (
        ["--model", "llama-3.1-8b"],
        {"model": {"preset": "llama-3.1-8b"}, "engine": {"name": "vllm"}},
        64,
        0.05,
        64000.0,
    ),
    "8b-stated-disable": (
        ["--model", "llama-3.1-8b"],
        {"model": {"preset": "llama-3.1-8b"}, "engine": {"name": "vllm"}},
        256,
        0.02,
        64000.0,
    ),
    "70b-tp4-fp8-generic": (
        ["--model", "llama-3.3-70b", "--dtype", "fp8", "--tp", "4", "--engine", "generic"],
        {"model": {"preset": "llama-3.3-70b", "dtype": "fp8"}, "tensor_parallel": 4, "engine": {"name": "generic"}},
        256,
        0.35,
        25600.0,
    ),
    "too-few-drafts": ([], {"engine": {"name": "vllm"}}, 8, 0.6, 400.0),
}


@pytest.mark.parametrize("flags, config, batch, alpha, drafts", CASES.values(), ids=CASES.keys())
def test_breakeven_json_rows_agree_with_the_sidecars_first_evaluation_of_the_same_window(
    flags, config, batch, alpha, drafts
):
    (row,) = breakeven(*flags, "--k", str(K), "--batch", str(batch), "--alpha", str(alpha), "--drafts", f"{drafts:g}")[
        "rows"
    ]
    evaluation = sidecar_first_evaluation({**config, "draft": {"k": K}}, batch=batch, alpha=alpha, drafts=drafts)
    assert evaluation.batch_size == pytest.approx(batch) and evaluation.stats.drafts == drafts
    assert row["drafts"] == drafts
    assert row["verdict"] == evaluation.verdict
    for name in ("expected_speedup_lower", "expected_speedup_upper", "loss_probability"):
        expected = getattr(evaluation, name)
        assert row[name] == (None if expected is None else pytest.approx(expected, abs=1e-4)), name


def test_the_cases_cover_every_kind_of_first_verdict():
    verdicts = set()
    for flags, _config, batch, alpha, drafts in CASES.values():
        (row,) = breakeven(
            *flags, "--k", str(K), "--batch", str(batch), "--alpha", str(alpha), "--drafts", f"{drafts:g}"
        )["rows"]
        verdicts.add(row["verdict"])
    assert {"undecided", "insufficient_data", "keep", "disable"} <= verdicts


def test_breakeven_drafts_default_to_a_full_5m_window_at_the_row_batch():
    doc = breakeven("--model", "llama-3.1-8b", "--k", "3", "--batch", "1,64", "--alpha", "0.6")
    cm = cmod.build_cost_model(model="llama-3.1-8b", engine="vllm", draft_k=3)
    for row in doc["rows"]:
        b = row["batch"]
        assert row["drafts"] == round(b * WINDOW / cm.spec_step_time(b, 3))
    # More requests a step: more drafts in the same five minutes, a narrower interval from alpha's noise.
    assert doc["rows"][1]["drafts"] > doc["rows"][0]["drafts"]


def test_breakeven_without_alpha_has_no_sidecar_verdict():
    (row,) = breakeven("--k", "3", "--batch", "8")["rows"]
    assert "verdict" not in row and "loss_probability" not in row


def test_breakeven_table_shows_the_sidecar_verdict_and_loss_probability_per_row(capsys):
    assert main(["breakeven", "--model", "llama-3.1-8b", "--k", "3", "--batch", "1,64", "--alpha", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "sidecar verdict" in out and "P(S<1)" in out
    rows = [ln.split() for ln in out.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert len(rows) == 2
    for cells in rows:
        assert cells[4] in ("keep", "undecided", "shorten", "disable", "insufficient_data")
        assert 0.0 <= float(cells[5]) <= 1.0


def test_breakeven_help_says_what_the_drafts_default_is(capsys):
    with pytest.raises(SystemExit):
        main(["breakeven", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--drafts N" in help_text and "full 300 s window" in help_text and "T_spec(batch, K)" in help_text
