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
