"""The peer parser: prometheus_client's `text_string_to_metric_families`, swapped into specwatch.

`parse(text)` returns the same {family: exposition.Family} that specwatch's Selector returns for the
families vllm.py reads, so everything downstream (window, derive, decide, replay output) is unchanged
and only the parser differs. `install()` patches it into the running process (used to run the
whole `specwatch replay` command with this parser: `python -m bench.pcparser replay ...`).
"""

from __future__ import annotations

import sys

from prometheus_client.parser import text_string_to_metric_families

from specwatch import exposition
from specwatch.engines import registry


def parse(text: str, families=registry.FAMILIES) -> dict[str, exposition.Family]:
    values: dict[str, list] = {}
    created: dict[str, list] = {}
    kinds: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name
        kind = families.get(name)
        if kind is None and name.endswith("_created") and name[:-8] in families:
            name = name[:-8]  # text format 0.0.4: `<family>_created` is declared as its own gauge
        elif kind is None:
            continue
        for s in fam.samples:
            sample = exposition.Sample(s.name, tuple(s.labels.items()), float(s.value))
            if s.name.endswith("_created"):
                created.setdefault(name, []).append(sample)
            else:
                kinds[name] = kind
                values.setdefault(name, []).append(sample)
    return {
        name: exposition.Family(name, kinds[name], tuple(v), tuple(created.get(name, ()))) for name, v in values.items()
    }


def install() -> None:
    """Make specwatch parse with prometheus_client from now on (this process only): every Selector,
    the shared one and each target's own. Its `shape` then stays None (nothing vouches that two
    polls hold the same series), so the grouping runs in full every poll."""

    def peer_parse(self: exposition.Selector, text: str) -> dict[str, exposition.Family]:
        self.shape = None
        return parse(text, self.families)

    def peer_parse_values(
        self: exposition.Selector, text: str
    ) -> tuple[dict[str, exposition.Family] | None, list[float] | None]:
        # The grouping reads through parse_values (values alone when a poll repeats the last
        # one's layout): the peer always answers with families, so it never takes that path.
        return peer_parse(self, text), None

    exposition.Selector.parse = peer_parse  # type: ignore[method-assign]
    exposition.Selector.parse_values = peer_parse_values  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    from specwatch.cli.main import main

    sys.exit(main(sys.argv[1:]))
