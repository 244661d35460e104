"""Where one full poll of the real payload goes, measured as `python -m bench --only parse`
measures the poll: prometheus_client parses the payload first (so every cache is cold), then
`Pipeline.ingest` + `Pipeline.evaluate`, in CPU time of this thread.

`python -m bench.poll_parts [--rounds N]`: each part below is wrapped where the pipeline calls it
and its time summed per poll; medians per poll over every round of the recording (the first two
polls, empty windows, left out). The wrappers cost a little each, so the parts add up to more
than an unwrapped poll; compare runs of this tool, not its parts with the parse benchmark.

`python -m bench.poll_parts --against-plain-parse [--rounds N]`: no wrappers; two pipelines in this
process, one reading each payload as `Selector.parse_values` does, the other through
`parse_values_plain` (the remembered poll's lines found cut), polled in alternation (each after the
peer's parse, the order swapped every round): the full poll's medians, paired.
"""

from __future__ import annotations

import argparse
from functools import partial

from specwatch import costmodel
from specwatch.sidecar import pipeline as pipeline_module
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict import decide, evaluation, memo

from . import payloads
from .common import cpu_seconds, cpu_tally, median
from .parse_cost import default_config, pc_parse

#: (module, function name, label): where the pipeline looks each part up when it calls it.
PARTS = (
    (pipeline_module, "window_stats", "window_stats"),
    (pipeline_module, "evaluate_route", "evaluate_route"),
    (memo.decide, "assess", "assess_memo_miss"),
    (costmodel, "max_speculative_batch_size", "max_speculative_batch_size"),
    (costmodel, "best_draft_length", "best_draft_length"),
    (decide.uncertainty, "speedup_interval", "speedup_interval"),
    (evaluation, "with_controller_terms", "with_controller_terms"),
    # Worked out on the advice's first read, which the poll does not do: absent from the output
    # unless something in the poll reads them again.
    (evaluation, "controller_terms", "controller_terms"),
)


def measure(rounds: int = 5) -> dict[str, float]:
    spent: dict[str, float] = {}
    originals = [(module, name, getattr(module, name)) for module, name, _ in PARTS]
    for (module, name, label), (_, _, fn) in zip(PARTS, originals, strict=True):
        setattr(module, name, cpu_tally(fn, label, spent))
    samples: dict[str, list[float]] = {}
    try:
        seq = [(t, text) for _, t, text in payloads.real_payloads()]
        for _ in range(rounds):
            pipeline = Pipeline(default_config())
            for i, (t, text) in enumerate(seq):
                pc_parse(text)
                spent.clear()
                ingest = cpu_seconds(partial(pipeline.ingest, "vllm", t, text))
                evaluate = cpu_seconds(partial(pipeline.evaluate, t))
                if i >= 2:
                    for label, seconds in {
                        "poll": ingest + evaluate,
                        "Pipeline.ingest": ingest,
                        "Pipeline.evaluate": evaluate,
                        **spent,
                    }.items():
                        samples.setdefault(label, []).append(seconds)
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)
    return {f"{label}_us": median(xs) * 1e6 for label, xs in samples.items()}


def against_plain_parse(rounds: int = 6) -> dict[str, float]:
    seq = [(t, text) for _, t, text in payloads.real_payloads()]
    samples: dict[str, list[float]] = {"poll_us": [], "poll_plain_parse_us": []}
    for r in range(rounds):
        pipelines = {"poll_us": Pipeline(default_config()), "poll_plain_parse_us": Pipeline(default_config())}
        for pipeline in pipelines.values():
            pipeline.ingest("vllm", *seq[0])  # the target's parser, remembering the first poll
        selector = pipelines["poll_plain_parse_us"]._targets["vllm"].grouping.selector
        selector.parse_values = selector.parse_values_plain  # type: ignore[method-assign]
        order = list(pipelines.items())
        for i, (t, text) in enumerate(seq[1:], 1):
            for label, pipeline in order if r % 2 == 0 else order[::-1]:
                pc_parse(text)
                seconds = cpu_seconds(partial(pipeline.ingest, "vllm", t, text))
                seconds += cpu_seconds(partial(pipeline.evaluate, t))
                if i >= 2:
                    samples[label].append(seconds)
    return {label: median(xs) * 1e6 for label, xs in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against-plain-parse", action="store_true")
    args = parser.parse_args()
    measured = against_plain_parse(args.rounds) if args.against_plain_parse else measure(args.rounds)
    for key, value in measured.items():
        print(f"{key:40s} {value:10.1f}")


if __name__ == "__main__":
    main()
