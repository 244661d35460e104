"""What each per-poll shortcut of the window stage saves, against its plain version beside it.

`python -m bench.shortcuts [--rounds N]`: the real vLLM recording (tests/fixtures, one engine) is
read through a Pipeline once, keeping every route snapshot. Then, in alternation round after
round and in CPU time of this thread:

- `Selector.parse_values` / `parse_values_plain`: every payload read by one selector, which
  remembers the last poll (the remembered poll's lines found whole / found cut);
- `window.implausible` / `implausible_plain` on every snapshot;
- `RouteWindow.ingest` / `ingest_plain`: every snapshot fed to a fresh window, each call timed;
- `decide.with_fields` / `dataclasses.replace`: each assessed window's assessment given its
  controller terms;
- `evaluation.with_controller_terms` / `with_controller_terms_plain`: each assessed window's
  assessment with its controller terms to be worked out on their first read (which the poll does
  not do) / worked out now, as the evaluation called them.

Medians per call. The shortcuts are tested to give the same answers (tests/unit/exposition/
test_lastpoll_whole_lines.py, tests/unit/windows/
test_implausible_shortcut.py, test_window_shortcuts.py, tests/unit/verdict/
test_evaluation_controller_terms.py); this shows what they cost.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from specwatch.engines.series import RouteSnapshot
from specwatch.engines.vllm import VLLM
from specwatch.exposition import Selector
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict import evaluation
from specwatch.verdict.decide import Assessment, with_fields
from specwatch.windows.derive import WindowStats
from specwatch.windows.window import RouteWindow, implausible, implausible_plain

from . import payloads
from .common import cpu_each, median
from .parse_cost import default_config


def recorded() -> list[RouteSnapshot]:
    """The real recording's route snapshots, as the pipeline read them."""
    pipeline = Pipeline(default_config())
    snaps: list[RouteSnapshot] = []
    for _, t, text in payloads.real_payloads():
        pipeline.ingest("vllm", t, text)
        snaps += [route.window.entries[-1].snapshot for route in pipeline._routes.values()]
    return snaps


def assessed() -> tuple[list[WindowStats], list[Assessment]]:
    """The real recording's assessed windows (speculation with drafts and a batch)."""
    pipeline = Pipeline(default_config())
    stats: list[WindowStats] = []
    assessments: list[Assessment] = []
    for _, t, text in payloads.real_payloads():
        pipeline.ingest("vllm", t, text)
        for evaluated in pipeline.evaluate(t):
            s = evaluated.stats
            if s.drafts and s.draft_length and s.acceptance_rate is not None and s.batch_size and s.position_rates:
                stats.append(s)
                assessments.append(evaluated.assessment)
    return stats, assessments


def terms_calls() -> list[tuple]:
    """The arguments of every `with_controller_terms` call of the real recording's evaluations."""
    calls: list[tuple] = []
    deferred = evaluation.with_controller_terms

    def recorded_call(*args):
        calls.append(args)
        return deferred(*args)

    evaluation.with_controller_terms = recorded_call  # type: ignore[assignment]
    try:
        pipeline = Pipeline(default_config())
        for _, t, text in payloads.real_payloads():
            pipeline.ingest("vllm", t, text)
            pipeline.evaluate(t)
    finally:
        evaluation.with_controller_terms = deferred  # type: ignore[assignment]
    return calls


def _ingest_all(ingest: Callable[[RouteWindow, RouteSnapshot], bool], snaps: list[RouteSnapshot]) -> list[float]:
    window = RouteWindow(300.0)
    return cpu_each(lambda snap: ingest(window, snap), snaps)  # type: ignore[arg-type]


def _parse_all(plain: bool, texts: list[str]) -> list[float]:
    selector = Selector(VLLM.families)
    return cpu_each(selector.parse_values_plain if plain else selector.parse_values, texts)


def measure(rounds: int = 20) -> dict[str, float]:
    texts = [text for _, _, text in payloads.real_payloads()]
    snaps = recorded()
    stats, assessments = assessed()
    terms = terms_calls()
    cases: dict[str, Callable[[], list[float]]] = {
        # The first payload is read in full either way (nothing remembered yet).
        "parse_values": lambda: _parse_all(False, texts)[1:],
        "parse_values_plain": lambda: _parse_all(True, texts)[1:],
        "implausible": lambda: cpu_each(implausible, snaps),  # type: ignore[arg-type]
        "implausible_plain": lambda: cpu_each(implausible_plain, snaps),  # type: ignore[arg-type]
        "ingest": lambda: _ingest_all(RouteWindow.ingest, snaps)[2:],
        "ingest_plain": lambda: _ingest_all(RouteWindow.ingest_plain, snaps)[2:],
        "with_fields": lambda: cpu_each(lambda a: with_fields(a, controller_terms=None), assessments),  # type: ignore[arg-type]
        "with_fields_plain": lambda: cpu_each(lambda a: dataclasses.replace(a, controller_terms=None), assessments),  # type: ignore[arg-type]
        "with_controller_terms": lambda: cpu_each(lambda c: evaluation.with_controller_terms(*c), terms),  # type: ignore[arg-type]
        "with_controller_terms_plain": lambda: cpu_each(lambda c: evaluation.with_controller_terms_plain(*c), terms),  # type: ignore[arg-type]
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            samples[name] += case()
    out = {f"{name}_us": median(xs) * 1e6 for name, xs in samples.items()}
    for name in ("parse_values", "implausible", "ingest", "with_fields", "with_controller_terms"):
        out[f"{name}_plain_over_shortcut"] = out[f"{name}_plain_us"] / out[f"{name}_us"]
    out["snapshots"] = float(len(snaps))
    out["assessed_windows"] = float(len(stats))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    for key, value in measure(args.rounds).items():
        print(f"{key:36s} {value:10.2f}")


if __name__ == "__main__":
    main()
