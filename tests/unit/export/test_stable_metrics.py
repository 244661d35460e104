"""The stable families hold their golden list; experimental ones are free to change."""

from __future__ import annotations

from dataclasses import replace

from specwatch.export import contract
from support.stable_metrics import GOLDEN, stable_changes


def _with(family_name: str, **changes: object) -> str:
    """The stable list of a contract where the family `family_name` (every row of it) was changed."""
    return contract.stable_list(
        replace(family, **changes) if family.name == family_name else family  # type: ignore[arg-type]
        for family in contract.FAMILIES
    )


def test_the_stable_families_match_their_golden_list():
    changes = stable_changes(GOLDEN.read_text(), contract.stable_list())
    assert not changes, "\n".join(changes)


def test_every_family_the_shipped_alerts_and_dashboard_are_built_on_is_stable():
    core = ("acceptance_ratio", "breakeven_acceptance_ratio", "itl_p99_seconds", "verdict", "loss_probability")
    assert all(contract.BY_NAME["specwatch_" + name].stability == "stable" for name in core)


def test_renaming_a_stable_family_fails_as_a_stable_family_changed():
    changes = stable_changes(contract.stable_list(), _with("specwatch_acceptance_ratio", name="specwatch_alpha"))
    assert any(c.startswith("stable family changed: 'specwatch_acceptance_ratio ") for c in changes)


def test_relabelling_a_stable_family_fails_as_a_stable_family_changed():
    changes = stable_changes(contract.stable_list(), _with("specwatch_verdict", own=("state",)))
    assert [c.split(":")[0] for c in changes] == ["stable family changed", "stable family not in the golden list"]


def test_removing_a_stable_family_or_making_it_experimental_fails():
    demoted = _with("specwatch_loss_probability", stability="experimental")
    assert any(
        "'specwatch_loss_probability " in c and "gone" in c for c in stable_changes(contract.stable_list(), demoted)
    )


def test_an_experimental_family_is_free_to_change():
    renamed = _with("specwatch_step_time_curve_seconds", name="specwatch_step_time_knots_seconds", own=("knot",))
    assert renamed == contract.stable_list()
    assert stable_changes(contract.stable_list(), renamed) == []
