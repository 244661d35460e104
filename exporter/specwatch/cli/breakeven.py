"""``specwatch breakeven`` answers as the sidecar would: the lesson's command (lesson/breakeven.py)
gets the sidecar's first evaluation of each row from here, the layer that may import the verdict
(the lesson may not: pyproject.toml, [tool.importlinter])."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from specwatch import costmodel as cmod
from specwatch.verdict.point import first_evaluation, point_window, window_drafts


def sidecar_answer(
    cm: cmod.CostModel, *, batch: int, k: int, alpha: float, drafts: float | None, method: str
) -> Mapping[str, float | str | None]:
    """What the sidecar's first evaluation decides for a window of ``drafts`` drafts (None: a full
    5m window's at ``batch``) at acceptance rate ``alpha`` with draft length ``k``, priced by ``cm``."""
    n = window_drafts(cm, batch, k) if drafts is None else float(drafts)
    evaluation = first_evaluation(cm, point_window(batch=batch, k=k, alpha=alpha, drafts=n), method=method)
    return {
        "drafts": int(n) if n.is_integer() else n,
        "verdict": evaluation.verdict,
        "expected_speedup_lower": evaluation.expected_speedup_lower,
        "expected_speedup_upper": evaluation.expected_speedup_upper,
        "loss_probability": evaluation.loss_probability,
    }


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Give the lesson's `breakeven` (added before this) the sidecar's answer for its rows."""
    breakeven = subparsers.choices.get("breakeven")
    if breakeven is not None:
        breakeven.set_defaults(sidecar=sidecar_answer)
