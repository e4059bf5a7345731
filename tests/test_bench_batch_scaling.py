"""The arithmetic of bench/bench_batch_scaling.py on small hand-made inputs (no Ray)."""

import pytest

from bench.bench_batch_scaling import scaling, steady_rate


def test_steady_rate_starts_when_the_first_batch_is_done():
    # Batches of 10, 30 and 20 samples done at 5 s, 7 s and 9 s: the first batch's 10
    # samples are before the interval, so 50 samples in 4 s.
    assert steady_rate([5.0, 7.0, 9.0], [10, 30, 20]) == 12.5


def test_steady_rate_takes_the_earliest_batch_whatever_its_position():
    # Shard file times need not come in shard order: the earliest one opens the interval.
    assert steady_rate([7.0, 5.0, 9.0], [30, 10, 20]) == 12.5


@pytest.mark.parametrize("times, sizes, message", [
    ([1.0], [8], "at least two batches"),
    ([1.0, 2.0], [8], "2 times and 1 sizes"),
    ([3.0, 3.0], [8, 8], "no interval"),
])
def test_steady_rate_refuses_what_it_cannot_measure(times, sizes, message):
    with pytest.raises(ValueError, match=message):
        steady_rate(times, sizes)


def test_scaling_and_efficiency():
    assert scaling(100.0, 170.0, 2) == pytest.approx((1.7, 0.85))
    assert scaling(100.0, 150.0, 2)[1] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="positive one-worker rate"):
        scaling(0.0, 150.0, 2)
