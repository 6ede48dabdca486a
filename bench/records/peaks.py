"""The measured peaks' records (``bench peak``, bench.measure.device_peak's sweep): written one file per
measurement, the newest found again by host, device and precision, and a run's MFU against it and against the
published peak (the result's ``utilisation`` section)."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.errors import BenchError
from bench.measure.device_peak import Sweep, device_slug, spec_peak
from bench.records import store
from bench.records.header import header, new_run_id, utc_stamp
from bench.records.kinds import Peak, PeakShape
from bench.records.schema import Utilisation


def record(sweep: Sweep) -> Peak:
    """The ``peak`` record of a sweep: every repeat's rate, each shape's median, the best shape's."""
    rows = [PeakShape(m=m, n=n, k=k, tflops=rates, tflops_median=statistics.median(rates))
            for (m, n, k), rates in sweep.rates.items()]
    best = max(rows, key=lambda r: r.tflops_median)
    return Peak(**header(new_run_id("peak"), store.Kind.PEAK), host=sweep.host, device=sweep.device,
                precision=sweep.precision, dtype=sweep.dtype, torch=sweep.torch,
                seconds_per_repeat=sweep.seconds_per_repeat, repeats=sweep.repeats, shapes=rows,
                peak_tflops=best.tflops_median, peak_shape=[best.m, best.n, best.k],
                definition="best shape's median rate over its repeats; rate = 2 x M x N x K / time")


def peak_stem(host: str, device: str, precision: str) -> str:
    return f"{host}-{device_slug(device)}-{precision}"


def write(output: str | Path, record: Peak) -> Path:
    """A new file per measurement (none is overwritten): OUTPUT/peak/<host>-<device>-<precision>-<UTC time>.json,
    written whole (bench.files)."""
    folder = Path(output) / "peak"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{peak_stem(record.host, record.device, record.precision)}-{utc_stamp()}.json"
    n = 1
    while path.exists():
        n += 1
        path = path.with_name(f"{path.stem.rsplit('.', 1)[0]}.{n}.json")
    return store.write(path, record)


def latest(output: str | Path, host: str, device: str, precision: str) -> Path | None:
    stem = peak_stem(host, device, precision)
    found = sorted((Path(output) / "peak").glob(f"{stem}-2*.json"))  # UTC stamps sort in time order
    return found[-1] if found else None


def load_measured(output: str | Path, host: str, device: str, precision: str) -> tuple[float | None, str]:
    """The newest `bench peak` figure for this host, device and precision in OUTPUT/peak, or why there is none."""
    path = latest(output, host, device, precision)
    if path is None:
        return None, (f"no {peak_stem(host, device, precision)}-*.json in {Path(output) / 'peak'}: run `bench peak` "
                      "with the same --output, device, precision (and on a CPU, --np)")
    try:
        return store.load(path, Peak).peak_tflops, str(path)
    except BenchError:
        return None, f"{path} is not a `bench peak` result"


def utilisation(model_tflops: float | None, precision: str, output: str | Path, host: str, device: str,
                gpu_name: str | None) -> Utilisation:
    """The result's ``utilisation`` section: MFU against the measured peak and against the spec peak."""
    measured, measured_source = load_measured(output, host, device, precision)
    spec, spec_source = spec_peak(gpu_name if device.startswith("cuda") else None, precision)

    def ratio(peak: float | None) -> float | None:
        return model_tflops / peak if model_tflops and peak else None

    return Utilisation(unit="TFLOP/s", model_tflops_per_device=model_tflops, precision=precision,
                       measured_peak_tflops=measured, measured_peak_source=measured_source,
                       mfu_measured=ratio(measured), spec_peak_tflops=spec, spec_peak_source=spec_source,
                       mfu_spec=ratio(spec),
                       definitions={"mfu_measured": "model_tflops_per_device / measured_peak_tflops (bench peak)",
                                    "mfu_spec": "model_tflops_per_device / spec_peak_tflops (published dense rate)"})
