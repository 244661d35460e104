"""The fast path for a poll whose lines are the last good poll's lines with new values: only the
values are converted and checked; any difference or doubt sends the poll to the full read."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import getitem, itemgetter
from typing import TypeVar, cast

from specwatch.exposition.samples import SKIP, Family, Labels, Sample, Series
from specwatch.exposition.syntax import TYPE_PREFIX, Line

_T = TypeVar("_T")

_head, _value_text, _whole_line = itemgetter(0), itemgetter(1), itemgetter(2)
_make_sample = partial(tuple.__new__, Sample)  # Sample from a (name, labels, value) tuple, all in C


def _pick(items: Sequence[_T], positions: tuple[int, ...]) -> tuple[_T, ...]:
    return tuple([items[i] for i in positions])


def picker(positions: tuple[int, ...]) -> Callable[[Sequence[_T]], tuple[_T, ...]]:
    """_pick(items, positions) as one C call (itemgetter), built once per remembered poll."""
    if len(positions) >= 2:
        return itemgetter(*positions)  # a tuple for 2+ positions
    return partial(_pick, positions=positions)


@dataclass(frozen=True)
class _HistogramPlan:
    buckets: tuple[int, ...]  # positions of the buckets, by increasing le
    count: int
    sum: int


@dataclass(frozen=True)
class LastPoll:
    """The shape of the last good poll: which lines, which series, where each sample goes, which
    value checks apply. A poll with exactly the same lines apart from the values (same series
    texts, same TYPE lines, same order) only needs its values converted and checked; anything
    else, or any doubt about a value, goes through `Selector._read`."""

    heads: list[str]
    lines: list[str]
    plain: tuple[int, ...]  # positions in the found lines of the samples, in order
    names: tuple[str, ...]
    labels: tuple[Labels, ...]
    families: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...]], ...]  # name, kind, values, created
    not_negative: tuple[int, ...]  # counters and gauges: finite and >= 0
    timestamps: tuple[int, ...]  # _created: finite
    histograms: tuple[_HistogramPlan, ...]
    # The position tuples above as pickers (picker()): the fast path's selections in C.
    _plain: Callable[[Sequence[str]], tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _not_negative: Callable[[Sequence[float]], tuple[float, ...]] = field(init=False, repr=False, compare=False)
    _timestamps: Callable[[Sequence[float]], tuple[float, ...]] = field(init=False, repr=False, compare=False)
    _buckets: tuple[Callable[[Sequence[float]], tuple[float, ...]], ...] = field(init=False, repr=False, compare=False)
    # For reread_lines (whole lines): the cut lines' places, how each starts (`name{labels} `) and
    # where its value begins; the whole lines' places and texts; the samples among the cut lines.
    _cut: Callable[[Sequence[str]], tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _starts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _value_slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)
    _whole: Callable[[Sequence[str]], tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _whole_lines: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _samples_of_cut: Callable[[Sequence[str]], tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_plain", picker(self.plain))
        object.__setattr__(self, "_not_negative", picker(self.not_negative))
        object.__setattr__(self, "_timestamps", picker(self.timestamps))
        object.__setattr__(self, "_buckets", tuple(picker(plan.buckets) for plan in self.histograms))
        cut = tuple(i for i, head in enumerate(self.heads) if head)
        whole = tuple(i for i, head in enumerate(self.heads) if not head)
        starts = tuple(self.heads[i] + " " for i in cut)
        place = {at: n for n, at in enumerate(cut)}
        object.__setattr__(self, "_cut", picker(cut))
        object.__setattr__(self, "_starts", starts)
        object.__setattr__(self, "_value_slices", tuple(slice(len(start), None) for start in starts))
        object.__setattr__(self, "_whole", picker(whole))
        object.__setattr__(self, "_whole_lines", tuple(self.lines[i] for i in whole))
        object.__setattr__(self, "_samples_of_cut", picker(tuple(place[at] for at in self.plain)))

    @staticmethod
    def remember(
        found: list[Line], result: Mapping[str, Family], cache: Mapping[str, Series], kinds: Mapping[str, str]
    ) -> LastPoll | None:
        plain: list[int] = []
        series: list[Series] = []
        for i, (head, value, line) in enumerate(found):
            if not value:
                if not line.startswith(TYPE_PREFIX):
                    return None  # a sample line the pattern did not cut: keep to the general path
                continue
            known = cache.get(head)
            if known is None:
                return None  # the cache was cleared during the poll
            if known is not SKIP:
                plain.append(i)
                series.append(known)
        if not series:
            return None  # with no sample, whether the text is an exposition at all depends on more
        slots: dict[tuple[str, bool], list[int]] = {}
        for position, s in enumerate(series):
            slots.setdefault((s.family, s.suffix == "_created"), []).append(position)
        families = []
        not_negative: list[int] = []
        timestamps: list[int] = []
        histograms: list[_HistogramPlan] = []
        for name, family in result.items():
            values = tuple(slots.get((name, False), ()))
            created = tuple(slots.get((name, True), ()))
            if len(values) != len(family.samples) or len(created) != len(family.created):
                return None
            families.append((name, kinds[name], values, created))
            timestamps += created
            if kinds[name] != "histogram":
                not_negative += values
                continue
            groups: dict[Labels, dict[str, list[tuple[float, int]]]] = {}
            for position in values:
                s = series[position]
                groups.setdefault(s.group, {}).setdefault(s.suffix, []).append((s.bound, position))
            for parts in groups.values():
                if len(parts.get("_count", ())) != 1 or len(parts.get("_sum", ())) != 1 or not parts.get("_bucket"):
                    return None
                histograms.append(
                    _HistogramPlan(
                        tuple(p for _, p in sorted(parts["_bucket"])), parts["_count"][0][1], parts["_sum"][0][1]
                    )
                )
        return LastPoll(
            list(map(_head, found)),
            list(map(_whole_line, found)),
            tuple(plain),
            tuple(s.name for s in series),
            tuple(s.labels for s in series),
            tuple(families),
            tuple(not_negative),
            tuple(timestamps),
            tuple(histograms),
        )

    def reread(self, found: list[Line]) -> dict[str, Family] | None:
        """The families of `found` if it has this poll's lines with valid values, else None."""
        values = self.reread_values(found)
        return None if values is None else self.families_of(values)

    def reread_values(self, found: list[Line]) -> list[float] | None:
        """The sample values of `found` (in line order) if it has this poll's lines with valid
        values, else None."""
        if list(map(_head, found)) != self.heads or list(map(_whole_line, found)) != self.lines:
            return None
        return self._checked_values(self._plain(list(map(_value_text, found))))

    def reread_lines(self, lines: list[str]) -> list[float] | None:
        """`reread_values` for the same lines found whole (syntax.whole_line_finder): the sample
        values if they are this poll's lines with valid values, else None.

        A line this poll cut as `name{labels}` and value is the same cut again when it starts with
        the same `name{labels} ` and the rest is a value the cut takes (no space, no brace, not
        empty): the cut is decided by the line's text up to that space alone. Whole lines (TYPE
        lines) must be equal. The same answer as the cut lines through `reread_values`
        (tests/unit/exposition/test_lastpoll_whole_lines.py)."""
        if len(lines) != len(self.heads) or self._whole(lines) != self._whole_lines:
            return None
        cut = self._cut(lines)
        if not all(map(str.startswith, cut, self._starts)):
            return None
        rest = cast(list[str], list(map(getitem, cut, self._value_slices)))  # each line[start:], in C
        if not all(rest):
            return None  # an empty value: the line is not cut
        joined = "".join(rest)
        if " " in joined or "{" in joined or "}" in joined:
            return None  # a timestamp, or a brace the cut does not take after the labels
        return self._checked_values(self._samples_of_cut(rest))

    def _checked_values(self, texts: Sequence[str]) -> list[float] | None:
        """The samples' value texts as floats if each passes the checks of this poll's families."""
        try:
            values = list(map(float, texts))
        except ValueError:
            return None
        if self.not_negative:
            checked = self._not_negative(values)
            if not (math.isfinite(sum(checked)) and min(checked) >= 0):
                return None  # a NaN, an infinity or a negative value (or a sum overflow): look closer
        if self.timestamps and not math.isfinite(sum(self._timestamps(values))):
            return None
        for plan, pick_buckets in zip(self.histograms, self._buckets, strict=True):
            buckets = pick_buckets(values)
            if not (
                buckets[0] >= 0
                and all(map(operator.ge, buckets[1:], buckets[:-1]))
                and not math.isinf(buckets[-1])
                and values[plan.count] == buckets[-1]
                and math.isfinite(values[plan.sum])
            ):
                return None
        return values

    def families_of(self, values: list[float]) -> dict[str, Family]:
        """The families that `reread_values`' values make."""
        samples = list(map(_make_sample, zip(self.names, self.labels, values, strict=False)))
        return {
            name: Family(name, kind, _pick(samples, value_at), _pick(samples, created_at))
            for name, kind, value_at, created_at in self.families
        }

    def positions(self, family: str, created: bool) -> tuple[int, ...]:
        """Where in `reread_values`' values the samples (or the _created samples) of `family` are,
        in the order of `families_of`' Family.samples (Family.created)."""
        for name, _, value_at, created_at in self.families:
            if name == family:
                return created_at if created else value_at
        return ()
