"""Exact-key memo of ``decide.assess``: an unchanged window is not assessed twice.

An assessment is a pure function of the cost model (a new curve is a new model),
a few WindowStats fields and the decision settings. Quiet targets, a target that stopped answering
(its windows are re-evaluated with no new data), and 1m/5m windows holding the same polls ask the
same question poll after poll; the answer is kept in a bounded LRU and returned as is. Keys are
exact (no quantisation), so a cached assessment is bit-identical to a fresh one.
"""

from __future__ import annotations

import json
import operator
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from specwatch.costmodel import CostModel
from specwatch.verdict import decide
from specwatch.windows.derive import WindowStats

if TYPE_CHECKING:
    from specwatch.config import DecisionConfig

#: The WindowStats fields ``decide.assess`` reads. The others (route, window, time, sample count,
#: span, ITL, token totals) cannot change an assessment: tests/unit/verdict/test_memo.py changes each of
#: them and checks that assess gives the same answer, so a new input of assess fails that test
#: until it is added here.
ASSESS_INPUTS = (
    "spec_present",
    "drafts",
    "generation_tokens",
    "acceptance_rate",
    "draft_length",
    "batch_size",
    "draft_coverage",
    "configured_k",
    "position_rates",
    "schema",
    "engines",
    "itl_p50_seconds",  # the step's spread, for an undecided verdict's canary length
    "itl_p99_seconds",
)

#: Assessments kept (what one costs with its key: docs/benchmarks.md). A repeated question is almost
#: always the last one of the same route and window (or of the other window over the same polls), so
#: a few per route-window suffice; with new traffic every poll the memo only costs its memory.
DEFAULT_SIZE = 256

_Key = tuple[object, ...]


#: The fields of ASSESS_INPUTS read in one call, as a tuple in that order.
_assess_inputs = operator.attrgetter(*ASSESS_INPUTS)


def stats_key(stats: WindowStats) -> tuple[object, ...]:
    key: tuple[object, ...] = _assess_inputs(stats)
    return key


class AssessmentCache:
    """``assess`` with the arguments of ``decide.assess``; one cache follows one cost model at a
    time (a new model, e.g. after a config reload, empties it)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._model: CostModel | None = None
        self._memo: OrderedDict[_Key, decide.Assessment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._memo)

    def assess(
        self,
        cm: CostModel,
        stats: WindowStats,
        decision: DecisionConfig,
        method: str | None,
        previous_verdict: str | None,
        *,
        config_method: str | None = "same",
        base_config: Mapping[str, object] | None = None,
    ) -> decide.Assessment:
        if cm is not self._model:
            self._memo.clear()
            self._model = cm
        stated = None if base_config is None else json.dumps(base_config, sort_keys=True, default=repr)
        key: _Key = (stats_key(stats), decision, method, previous_verdict, config_method, stated)
        memo = self._memo
        hit = memo.get(key)
        if hit is not None:
            memo.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        result = memo[key] = decide.assess(
            cm, stats, decision, method, previous_verdict, config_method=config_method, base_config=base_config
        )
        if len(memo) > self.size:
            memo.popitem(last=False)
        return result
