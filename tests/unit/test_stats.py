import math
import statistics

import pytest

from bench.measure.stats import summarize, t975, throughput_summary, window_throughput


def test_t_quantiles_match_tables():
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(9) == pytest.approx(2.262, abs=1e-3)
    assert t975(30) == pytest.approx(2.042, abs=1e-3)
    # beyond the table the expansion must stay close to published values
    assert t975(40) == pytest.approx(2.021, abs=2e-3)
    assert t975(120) == pytest.approx(1.980, abs=2e-3)
    with pytest.raises(ValueError):
        t975(0)


def test_summarize_known_sample():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]
    s = summarize(values)
    sd = statistics.stdev(values)
    half = 2.776 * sd / math.sqrt(5)
    assert s["mean"] == 11.0
    assert s["median"] == 11.0
    assert (s["min"], s["max"]) == (9.0, 13.0)
    assert s["ci95_half_width"] == pytest.approx(half)
    assert s["ci95"] == pytest.approx([11.0 - half, 11.0 + half])


def test_summarize_single_value_has_no_interval():
    s = summarize([5.0])
    assert s["sd"] is None and s["ci95"] is None and s["mean"] == 5.0
    with pytest.raises(ValueError):
        summarize([])


def test_total_throughput_is_bounded_by_slowest_rank():
    # rank 1 is slower in window 0, rank 0 in window 1; 20 images per rank per window
    window_s = [[1.0, 2.0], [2.0, 1.0]]
    assert window_throughput(window_s, 20) == [20.0, 20.0]  # 40 images / 2 s


def test_summary_reports_rank0_times_world_apart_from_measured_total():
    window_s = [[1.0, 1.0], [2.0, 2.0]]  # rank 0 fast, rank 1 slow
    s = throughput_summary(window_s, 10)
    assert s["samples_per_sec_total"] == pytest.approx(10.0)  # 20 images / 2 s
    assert s["samples_per_sec_per_gpu"] == pytest.approx(5.0)
    assert s["samples_per_sec_rank0_x_world"] == pytest.approx(20.0)  # what Horovod's scripts print
    assert s["windows_total_samples_per_sec"] == [10.0, 10.0]


def test_ranks_with_different_window_counts_are_rejected():
    with pytest.raises(ValueError):
        window_throughput([[1.0, 1.0], [1.0]], 10)


def test_the_headline_is_a_ratio_of_totals_not_a_mean_of_rates():
    """Numbers issue, finding 7: windows of 1, 1, 1, 1 and 3 s of 100 samples each are 500 samples in 7 s,
    71.4/s; the mean of the per-window rates says 86.7/s. The slowest rank's total time bounds the job, and the
    interval comes from its window times."""
    from bench.measure.stats import throughput_summary

    s = throughput_summary([[1, 1, 1, 1, 3], [1, 1, 1, 1, 2]], 50)
    assert s["samples_per_sec_total"] == pytest.approx(500 / 7)
    assert s["total"]["mean"] == pytest.approx(86.67, abs=0.01)  # the biased figure, kept only as a spread
    assert s["samples_per_sec_per_gpu"] == pytest.approx(250 / 7)
    low, high = s["ci95"]
    half = 2.776 * statistics.stdev([1, 1, 1, 1, 3]) / math.sqrt(5)
    assert low == pytest.approx(100 / (1.4 + half)) and high == pytest.approx(100 / (1.4 - half))
    assert low < s["samples_per_sec_total"] < high and s["ci95_kind"] == "within-run"
    even = throughput_summary([[2.0, 2.0, 2.0]], 10)
    assert even["samples_per_sec_total"] == 5.0 and even["ci95"] == [5.0, 5.0]
    # m - h <= 0: no upper bound to give, but the lower one holds (the whole interval was dropped before)
    low, high = throughput_summary([[1.0, 9.0]], 10)["ci95"]
    assert low == pytest.approx(10 / (5 + 12.706 * statistics.stdev([1.0, 9.0]) / math.sqrt(2)), rel=1e-3)
    assert high is None
