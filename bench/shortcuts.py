"""What each per-poll shortcut of the window stage saves, against its plain version beside it.

`python -m bench.shortcuts [--rounds N]`: the real vLLM recording (tests/fixtures, one engine) is
read through a Pipeline once, keeping every route snapshot. Then, in alternation round after
round and in CPU time of this thread:

- `window.implausible` / `implausible_plain` on every snapshot;
- `RouteWindow.ingest` / `ingest_plain`: every snapshot fed to a fresh window, each call timed;
- the cost model's searches of every assessed window (each poll's 1m and 5m stats, at the route's
  cost model): the largest speculative batch (`max_speculative_batch_size`) and the K' scans
  (`best_draft_length`, which asks the memo on both sides, and `speedups_of_prefixes`), with the
  step times from the probes made for one (K, coverage) or one (batch, coverage)
  (`CostModel.step_times_by_batch` / `step_times_by_k`) and with every probe a question to the
  memoised `CostModel.step_times`. A fresh model each round: the pipeline asks each measured
  (K, coverage) once;
- `decide.with_fields` / `dataclasses.replace`: each assessed window's assessment given its
  controller terms.

Medians per call. The shortcuts are tested to give the same answers (tests/unit/windows/
test_implausible_shortcut.py, test_window_shortcuts.py); this shows what they cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

from specwatch import costmodel
from specwatch.costmodel import CostModel
from specwatch.engines.series import RouteSnapshot
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.decide import Assessment, extend_position_rates, with_fields
from specwatch.windows.derive import WindowStats
from specwatch.windows.window import RouteWindow, implausible, implausible_plain

from . import payloads
from .common import median
from .parse_cost import default_config


def recorded() -> list[RouteSnapshot]:
    """The real recording's route snapshots, as the pipeline read them."""
    pipeline = Pipeline(default_config())
    snaps: list[RouteSnapshot] = []
    for _, t, text in payloads.real_payloads():
        pipeline.ingest("vllm", t, text)
        snaps += [route.window.entries[-1].snapshot for route in pipeline._routes.values()]
    return snaps


class _MemoProbes(CostModel):
    """A CostModel whose searches ask the memoised ``step_times`` for every probe (the plain way)."""

    def step_times_by_batch(self, k: float, coverage: float = 1.0) -> Callable[[float], tuple[float, float]]:
        return lambda batch: self.step_times(batch, k, coverage)

    def step_times_by_k(self, batch: float, coverage: float = 1.0) -> Callable[[float], tuple[float, float]]:
        return lambda k: self.step_times(batch, k, coverage)


def assessed() -> tuple[CostModel, list[WindowStats], list[Assessment]]:
    """The real recording's assessed windows (speculation with drafts and a batch) and the cost
    model the pipeline assessed them with, before a learned curve replaced it."""
    pipeline = Pipeline(default_config())
    stats: list[WindowStats] = []
    assessments: list[Assessment] = []
    model = None
    for _, t, text in payloads.real_payloads():
        pipeline.ingest("vllm", t, text)
        for evaluation in pipeline.evaluate(t):
            s = evaluation.stats
            if s.drafts and s.draft_length and s.acceptance_rate is not None and s.batch_size and s.position_rates:
                stats.append(s)
                assessments.append(evaluation.assessment)
        for route in pipeline._routes.values():
            model = model or pipeline._prior_model(route)
    assert model is not None
    return model, stats, assessments


def _searches(build: Callable[[], CostModel], stats: list[WindowStats]) -> list[float]:
    """Each window's three searches at one fresh model, each window timed."""
    cm = build()
    clock = time.thread_time
    out = []
    for s in stats:
        assert s.draft_length is not None and s.batch_size is not None and s.position_rates is not None
        c = costmodel.draft_coverage(s.draft_coverage)
        b = max(s.batch_size, 1.0)
        p = extend_position_rates(s.position_rates, 8)
        a = clock()
        costmodel.max_speculative_batch_size(cm, s.draft_length, s.acceptance_rate, coverage=c)
        costmodel.best_draft_length(cm, b, p[:4], coverage=c)
        costmodel.speedups_of_prefixes(cm, b, p, c)
        out.append(clock() - a)
    return out


def _each(fn: Callable[[object], object], items: list) -> list[float]:
    out = []
    clock = time.thread_time
    for item in items:
        a = clock()
        fn(item)
        out.append(clock() - a)
    return out


def _ingest_all(ingest: Callable[[RouteWindow, RouteSnapshot], bool], snaps: list[RouteSnapshot]) -> list[float]:
    window = RouteWindow(300.0)
    return _each(lambda snap: ingest(window, snap), snaps)  # type: ignore[arg-type]


def measure(rounds: int = 20) -> dict[str, float]:
    snaps = recorded()
    model, stats, assessments = assessed()
    settings = {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.init}
    cases: dict[str, Callable[[], list[float]]] = {
        "implausible": lambda: _each(implausible, snaps),  # type: ignore[arg-type]
        "implausible_plain": lambda: _each(implausible_plain, snaps),  # type: ignore[arg-type]
        "ingest": lambda: _ingest_all(RouteWindow.ingest, snaps)[2:],
        "ingest_plain": lambda: _ingest_all(RouteWindow.ingest_plain, snaps)[2:],
        "searches": lambda: _searches(lambda: CostModel(**settings), stats),
        "searches_plain": lambda: _searches(lambda: _MemoProbes(**settings), stats),
        "with_fields": lambda: _each(lambda a: with_fields(a, controller_terms=None), assessments),  # type: ignore[arg-type]
        "with_fields_plain": lambda: _each(lambda a: dataclasses.replace(a, controller_terms=None), assessments),  # type: ignore[arg-type]
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            samples[name] += case()
    out = {f"{name}_us": median(xs) * 1e6 for name, xs in samples.items()}
    for name in ("implausible", "ingest", "searches", "with_fields"):
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
