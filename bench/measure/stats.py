"""Throughput statistics over timed windows.

Formulas (every one is applied to the per-window samples, never to a single aggregate):

* A *window* is ``steps_per_window`` training steps between two device synchronisations.
  Measuring process r's window w takes ``t[r][w]`` seconds and processes
  ``B * R * steps_per_window`` samples (images for the CNNs; B = per-device batch size, R = replicas the process drives:
  1 for one-process-per-GPU modes, the local GPUs for MirroredStrategy, the workers for the
  parameter-server coordinator).
* Total throughput of window w (samples/s, all ranks)::

      T_total[w] = sum_r(B * R * steps_per_window) / max_r(t[r][w])

  The slowest rank bounds the window: in synchronous data-parallel training no rank can be
  further along than the allreduce allows, so the job as a whole is only as fast as its slowest rank.
* The headline, the run's total throughput (samples/s, all ranks), is every timed sample over the slowest
  rank's total timed time::

      T_total = W * sum_r(B * R * steps_per_window) / max_r(sum_w t[r][w])

  a ratio of totals, never the mean of the per-window rates (which weighs a fast window as much as a slow one
  and biases the figure upward: windows of 1, 1, 1, 1 and 3 s of 100 samples each give a mean rate of 86.7/s
  against the true 500 / 7 = 71.4/s). Its 95% interval comes from that rank's window times: with m their mean
  and h the Student-t half-width of m, ``[S / (m + h), S / (m - h)]`` (S = samples per window, all ranks); the
  upper bound is absent when ``m - h <= 0``. The interval is *within one run*: consecutive windows of one launch
  leave out what changes between launches (NCCL's algorithm choice, cuDNN autotuning, clocks, heat).
* The per-window rates ``T_total[w]`` are kept, with their median and spread.
* Per-GPU (per-replica) throughput: ``T_per_gpu = T_total / world_size``, world_size = all replicas.
* Horovod's own scripts print ``rank-0 img/s * number of processes``; we keep that figure, labelled
  ``samples_per_sec_rank0_x_world``, so the difference from the measured total is visible.
* Over the windows (``summarize``): mean, sample standard deviation, 95% confidence interval of the mean
  (Student t, ``mean +- t_{0.975, n-1} * sd / sqrt(n)``), median, min, max.
* Scaling efficiency (used by reports): ``E_n = T_n / (n * T_1)`` against a 1-rank baseline of the
  same mode, model, batch and precision.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
_Z975 = 1.959964


def t975(df: int) -> float:
    """Student-t 0.975 quantile; the table up to df=30, a Cornish-Fisher expansion beyond (error < 1e-3)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, sd, 95% CI half-width and bounds, median, min, max of a sample (None where undefined)."""
    n = len(values)
    if n == 0:
        raise ValueError("no samples")
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else None
    half = t975(n - 1) * sd / math.sqrt(n) if sd is not None else None
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "ci95_half_width": half,
        "ci95": [mean - half, mean + half] if half is not None else None,
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def window_throughput(window_seconds: Sequence[Sequence[float]], samples_per_rank_window: int) -> list[float]:
    """Total images/s per window across ranks: sum of images / slowest rank's window time.

    ``window_seconds[r][w]`` is rank r's time for window w; all ranks must report the same count.
    """
    counts = {len(ws) for ws in window_seconds}
    if len(counts) != 1:
        raise ValueError(f"ranks report different window counts: {sorted(counts)}")
    world = len(window_seconds)
    return [world * samples_per_rank_window / max(times) for times in zip(*window_seconds, strict=True)]


def throughput_summary(window_seconds: Sequence[Sequence[float]], samples_per_rank_window: int,
                       replicas: int | None = None) -> dict:
    """The headline figures of a run from the raw per-rank window times.

    ``samples_per_rank_window`` is what one measuring process handles per window (B * R * steps);
    ``replicas`` is the world size in devices (default: one per measuring process).
    """
    processes = len(window_seconds)
    world = replicas or processes
    total = window_throughput(window_seconds, samples_per_rank_window)
    rank0 = [samples_per_rank_window / s for s in window_seconds[0]]
    headline, ci = ratio_of_totals(window_seconds, processes * samples_per_rank_window)
    s_total = summarize(total)
    return {
        "unit": "samples/s",
        "samples_per_sec_total": headline,
        "samples_per_sec_per_gpu": headline / world,
        "ci95": ci,
        "ci95_kind": "within-run",
        "median": s_total["median"],
        "total": s_total,
        "per_gpu": summarize([t / world for t in total]),
        "samples_per_sec_rank0_x_world": statistics.fmean(rank0) * processes,  # Horovod's scripts' own figure
        "windows_total_samples_per_sec": total,
    }


def ratio_of_totals(window_seconds: Sequence[Sequence[float]], samples_per_window: int
                    ) -> tuple[float, list[float] | None]:
    """The headline throughput and its within-run 95% interval (module docstring): every timed sample over the
    slowest rank's total time; the interval mapped from the Student-t interval of that rank's mean window time."""
    slowest = max(window_seconds, key=sum)
    times = summarize(slowest)
    mean, half = times["mean"], times["ci95_half_width"]
    headline = samples_per_window / mean
    if half is None:
        return headline, None
    # mean - half <= 0 (few, very uneven windows): the time's lower bound is no time, so the rate has no upper
    # bound; the lower bound still holds and is kept
    upper = samples_per_window / (mean - half) if mean - half > 0 else None
    return headline, [samples_per_window / (mean + half), upper]


def fastest_window(window_s: list[list[float]]) -> int:
    """The index of the job's fastest timed window (each as long as its slowest rank's), from every rank's window
    durations."""
    lengths = [max(times) for times in zip(*window_s, strict=True)]
    return lengths.index(min(lengths))


def job_step(window_s: list[list[float]], steps_per_window: int) -> float:
    """The job's fastest timed window per step: the step every rank shares."""
    fastest = fastest_window(window_s)
    return max(w[fastest] for w in window_s) / steps_per_window
