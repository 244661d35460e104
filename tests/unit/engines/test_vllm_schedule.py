"""One reading of vLLM's `num_speculative_tokens_per_batch_size` schedule (specwatch.engines.vllm_schedule):
the config check, method inference, the verdict's "K at the live batch" and the writer agree, for
3-item and 5-item (context-bucketed) bands alike."""

from __future__ import annotations

import pytest

from specwatch.engines.vllm_schedule import (
    SCHEDULE_KEY,
    k_at_batch,
    parse_speculative_config,
    schedule_from_config,
    speculative_config,
)
from specwatch.verdict.evaluation import resolve_method, scheduled_ks
from specwatch.windows.derive import WindowStats

THREE_ITEM = {"method": "eagle3", "num_speculative_tokens": 4, SCHEDULE_KEY: [[1, 8, 4], [17, 64, 2], [65, 128, 1]]}
FIVE_ITEM = {
    "method": "eagle3",
    "num_speculative_tokens": 4,
    SCHEDULE_KEY: [[1, 8, 1, 2048, 4], [17, 64, 1, 2048, 2], [1, 8, 2049, 8192, 3], [17, 64, 2049, 8192, 1]],
}


@pytest.mark.parametrize(
    ("batch", "k"),
    [(1, 4), (8, 4), (12, 4), (16, 4), (17, 2), (64, 2), (100, 1), (128, 1), (500, 1)],
)
def test_k_at_batch_takes_the_band_then_the_band_before_a_gap_then_the_last_band(batch, k):
    assert k_at_batch(THREE_ITEM, batch) == k


@pytest.mark.parametrize(("batch", "k"), [(1, 4), (12, 4), (17, 2), (300, 2)])
def test_k_at_batch_reads_five_item_bands_as_the_highest_k_over_context_buckets(batch, k):
    assert k_at_batch(FIVE_ITEM, batch) == k


def test_k_values_list_every_band_of_three_and_five_item_schedules_capped_at_k():
    assert parse_speculative_config(THREE_ITEM).k_values == (4, 2, 1)
    assert parse_speculative_config(FIVE_ITEM).k_values == (4, 2, 3, 1)
    capped = {**THREE_ITEM, "num_speculative_tokens": 3}
    assert parse_speculative_config(capped).k_values == (3, 2, 1)
    assert parse_speculative_config({"num_speculative_tokens": 5}).k_values == (5,)


def test_without_a_schedule_k_at_batch_is_num_speculative_tokens_everywhere():
    assert [k_at_batch({"num_speculative_tokens": 3}, b) for b in (1, 64, 4096)] == [3, 3, 3]


def test_method_inference_sees_a_five_item_schedule_as_a_schedule():
    """Every request-step drafted, mean draft length 1.5 under K=4: under a schedule whose K are
    all >= 2 that can only be lookup misses (n-gram); unscheduled, it is a model-based drafter under
    a schedule nobody stated. Before, a 5-item schedule was dropped and read as unscheduled."""
    schedule = schedule_from_config(
        {"num_speculative_tokens": 4, SCHEDULE_KEY: [[1, 8, 1, 2048, 4], [9, 64, 1, 2048, 2]]}
    )
    assert scheduled_ks(schedule) == (4, 2)
    stats = WindowStats(
        "r", "5m", 0.0, 10, 300.0, True, drafts=5000.0, draft_length=1.5, configured_k=4, draft_coverage=1.0
    )
    assert resolve_method("auto", stats, schedule_ks=scheduled_ks(schedule)) == "auto:ngram"
    assert resolve_method("auto", stats, schedule_ks=None) == "auto:eagle3"


def test_the_writer_round_trips_through_the_reader():
    written = speculative_config("eagle3", 4, [[1, 16, 4], [17, 64, 2], [65, 512, 0]])
    schedule = parse_speculative_config(written)
    assert schedule.k_values == (4, 2, 0)
    assert [schedule.k_at(b) for b in (1, 16, 17, 65, 1000)] == [4, 4, 2, 0, 0]
