"""The GPU check's summary table (tools/gpu-check.sh): every step's exit, the measured peaks, every run's
throughput, MFU, power and energy, Horovod against its own script, and bench verify, as Markdown on stdout.

    python -m tools.gpu_check_summary RESULTS STATUS_TSV
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from bench.errors import BenchError
from bench.records import references, store
from bench.records.collect import load_results
from bench.records.describe import tuning_of
from bench.records.kinds import DataBench, Peak, Soak, Verify
from bench.records.schema import Result


def _f(value, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _against(result: Result) -> str:
    """The run's share of the shipped reference that matches it (bench.records.references), or '-'."""
    found = references.standing(result, [])
    return "-" if found is None else f"{found[0]:.0%} of {found[1].per_device:.0f} ({found[1].source.split(',')[0]})"


def _traffic(result: Result) -> str:
    """The interface counters against the computed bytes: the ratio, or why there is none (NCCL's paths)."""
    measured = result.traffic.measured if result.traffic else None
    computed = result.traffic.computed.bytes_per_step if result.traffic else None
    if not measured or not computed:
        return "-"
    if not measured.comparable:
        return "not comparable (NCCL)"
    return f"{measured.bytes_per_step / computed:.3f}"


M = TypeVar("M", bound=BaseModel)


def records(folder: Path, model: type[M]) -> list[M]:
    """Every record of ``model``'s kind under ``folder``, as the model."""
    found = []
    for path in sorted(folder.rglob("*.json")):
        try:
            found.append(store.load(path, model))
        except Exception:  # another kind, or not a record
            continue
    return found


def data_bench_section(benches: list[DataBench]) -> list[str]:
    """bench data bench: each loader alone per worker count, and where it decoded; whether DALI's GPU path ran."""
    if not benches:
        return []
    md = ["", "## Input pipeline alone (bench data bench)", "",
          "| loader | decodes on | workers | img/s (median) | rounds | decode rate per core |",
          "|---|---|---|---|---|---|"]
    for b in benches:
        md += [f"| {r.loader} | {r.device} | {r.workers} | {r.images_per_sec:.1f} | "
               f"{' '.join(f'{x:.0f}' for x in r.raw)} | {_f(b.decode_rate_per_core.get(r.loader))} |" for r in b.rows]
    if not any(r.loader == "dali" and r.device == "cuda" for b in benches for r in b.rows):
        md += ["", "DALI decoding on the GPU: not measured (no DALI on this machine, or no GPU visible to PyTorch)."]
    return md


def soak_section(soaks: list[Soak]) -> list[str]:
    """bench soak: each device's rate under sustained load, its throttling, heat and power, the product's digest,
    and every finding that is not ok."""
    if not soaks:
        return []
    md = ["", "## Sustained load (bench soak)", "",
          "| device | seconds | TFLOP/s (median) | slowest window | throttled samples | peak C | W mean / limit | "
          "product same after |", "|---|---|---|---|---|---|---|---|"]
    for s in soaks:
        for d in s.devices:
            n = d.nvml or {}
            power = (f"{_f(n.get('power_mean_w'), '.0f')} / {_f(n.get('power_limit_w'), '.0f')}" if n else "-")
            throttled = f"{n['throttled_samples']} of {n['throttle_samples_read']}" if n else "-"
            md.append(f"| {d.label} | {s.seconds:.0f} | {_f(d.median_tflops, '.4g')} | "
                      f"{_f(min(d.window_tflops) if d.window_tflops else None, '.4g')} | {throttled} | "
                      f"{_f(n.get('temperature_max_c'), 'g')} | {power} | "
                      f"{'-' if not d.digest_after else d.digest_after == d.digest_before} |")
        md += [f"- {f.status}: {f.check} {f.member}: {f.detail}" for f in s.findings if f.status != "ok"]
    return md


def loaders_section(runs: list[Result]) -> list[str]:
    """The loss steps: DALI with channels-last against the torch loader, on the same files in the same order and to
    the same epochs (each loader's own random crops, so close, never equal); whether DALI's path ran."""
    trained = [r for r in runs if r.training is not None and r.training.curve and r.config.channels_last
               and r.input is not None and r.input.loader in ("dali", "torch")]
    by_loader = {r.input.loader: r for r in sorted(trained, key=lambda r: r.created_utc)}
    if not by_loader:
        return []
    md = ["", "## DALI with channels-last against the torch loader (losses)", "",
          "| loader | mode | model | precision | np | epochs | train loss | held-out loss | top-1 | img/s total |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in by_loader.items():
        last = r.training.curve[-1]
        md.append(f"| {name} | {r.mode} | {r.config.model} | {r.config.precision} | {r.world_size} | {last.epoch} | "
                  f"{_f(last.train_loss, '.4f')} | {_f(last.eval_loss, '.4f')} | {last.top1:.4f} | "
                  f"{r.summary.samples_per_sec_total:.1f} |")
    dali, torch = by_loader.get("dali"), by_loader.get("torch")
    if dali is None:
        md += ["", "DALI with channels-last: not measured (no DALI on this machine)."]
    elif torch is not None:
        a, b = dali.training.curve[-1].train_loss, torch.training.curve[-1].train_loss
        if a is not None and b:
            md += ["", f"Training loss, DALI / torch loader: {a / b:.3f}."]
    return md


def input_section(runs: list[Result]) -> list[str]:
    """The --data runs: each rank's data wait and copy, the loader alone, and the cost against the synthetic run of
    the same mode, model, precision and ranks (bench compare's input_cost)."""
    from bench.commands.compare import input_cost

    fed = [(r, r.input) for r in runs if r.input is not None and r.input.source == "dataset" and r.training is None]
    if not fed:
        return []
    md = ["", "## Input pipeline (--data against synthetic)", "",
          "| mode | model | precision | np | loader, workers | data img/s | synthetic img/s | input cost | "
          "max host wait share | max device idle share | copy s (max rank) | loader alone img/s (min rank) | "
          "paced by |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, section in fed:
        c = r.config
        twin = next((x for x in runs if (x.input is None or x.input.source != "dataset") and x.mode == r.mode
                     and x.world_size == r.world_size and not x.config.channels_last
                     and (x.config.model, x.config.precision, x.config.batch_size, x.config.image_size)
                     == (c.model, c.precision, c.batch_size, c.image_size)),
                    None)
        data, synthetic = r.summary.samples_per_sec_total, twin and twin.summary.samples_per_sec_total
        cost = input_cost("synthetic", "dataset", synthetic, data) if synthetic else None
        copies = [p.h2d_s for p in section.per_rank if p.h2d_s is not None]
        rates = [p.loader_rate for p in section.per_rank if p.loader_rate]
        paced = section.paced_by_rank
        md.append(f"| {r.mode} | {c.model} | {c.precision} | {r.world_size} | {section.loader}, "
                  f"{'/'.join(map(str, section.workers))} | {data:.1f} | {_f(synthetic)} | "
                  f"{_f(cost and 100 * cost)}% | {_f(100 * (section.wait_share_max or 0))}% | "
                  f"{'-' if section.idle_share_max is None else f'{_f(100 * section.idle_share_max)}%'} | "
                  f"{_f(max(copies) if copies else None, '.3f')} | {_f(min(rates) if rates else None)} | "
                  f"{'-' if paced is None else f'rank {paced}'} |")
    return md


def anchors_section(runs: list[Result]) -> list[str]:
    """Every ResNet-50 run on an H100 or H200 against Lambda's published figure at its precision (amp-bf16 held
    against their AMP (fp16) figure, said so) and MLPerf's: the ratio per GPU, with the batch and settings beside it."""
    md = []
    for r in runs:
        c = r.config
        if c.model != "resnet50" or c.data or c.device != "cuda":
            continue
        gpu = next((g for g in ("H100", "H200") if g in " ".join(x.device for x in r.environment.ranks)), None)
        anchor = gpu and references.published(gpu, "amp-fp16" if c.precision.startswith("amp") else "fp32")
        if not anchor:
            continue
        rate = r.summary.samples_per_sec_per_gpu
        settings = ", ".join([f"batch {c.batch_size}", c.profile or "-"] +
                             ["channels-last"] * bool(c.channels_last) + [t for t in [tuning_of(c)] if t])
        how = "Lambda, PyTorch " + ("AMP" if anchor.precision == "amp-fp16" else "TF32")
        md.append(f"| {r.mode} | {c.precision} | {settings} | {rate:.1f} | {how} {anchor.per_device:.0f} at "
                  f"batch {anchor.batch_size} | {rate / anchor.per_device:.3f} | "
                  f"{rate / references.MLPERF_RESNET50[gpu]:.3f} |")
    if not md:
        return []
    return ["", "## ResNet-50 against the published figures (per GPU)", "",
            "| mode | precision | settings | img/s per GPU | published | ratio | ratio to MLPerf v4.0 |",
            "|---|---|---|---|---|---|---|", *md]


def training_section(runs: list[Result]) -> list[str]:
    """The runs that trained to a target (docs/training.md): epochs, time to the target, final accuracy."""
    trained = [(r, r.training) for r in runs if r.training is not None]
    if not trained:
        return []
    md = ["", "## Training to a target", "", "| mode | model | np | epochs run | target | time to target s | "
          "epochs to target | final top-1 | evaluations s | img/s total | resumed after epoch |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, t in trained:
        resumed = ", ".join(str(x.epoch) for x in t.resumed or []) or "-"
        md.append(f"| {r.mode} | {r.config.model} | {r.world_size} | {t.epochs_run} | "
                  f"{t.target_accuracy} | {_f(t.time_to_target_s)} | {t.epochs_to_target or '-'} | "
                  f"{_f(t.final_top1, '.4f')} | {t.eval_s_total:.1f} | {r.summary.samples_per_sec_total:.1f} | "
                  f"{resumed} |")
    return md


def trace_section(runs: list[Result]) -> list[str]:
    """The traced runs (--trace, bench.measure.trace): where the files are and what tracing cost per step."""
    traced = [(r, r.trace) for r in runs if r.trace is not None]
    if not traced:
        return []
    md = ["", "## Traces (--trace)", "", "| mode | model | np | steps | traced ms/step | windows ms/step | cost | "
          "files |", "|---|---|---|---|---|---|---|---|"]
    for r, t in traced:
        md.append(f"| {r.mode} | {r.config.model} | {r.world_size} | {t.steps} | "
                  f"{1e3 * t.traced_step_s:.2f} | {1e3 * t.untraced_step_s:.2f} | {100 * t.cost:+.1f}% | "
                  f"{t.folder}/ |")
    return md


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="the check's results folder (every result, peak and verify record)")
    p.add_argument("status", type=Path, help="its status.tsv: step, exit code, seconds, first error line")
    a = p.parse_args()
    results, status = a.results, a.status
    if not results.is_dir():
        raise SystemExit(f"gpu-check-summary: {results} is not a folder")
    md = ["# GPU check", ""]
    try:
        runs = load_results([results], [])
    except BenchError:  # no run's result (yet): the steps, and the records the other commands wrote
        runs = []
    if runs:
        env = runs[0].environment
        torch = env.part("torch")
        gpus = (env.nvml or {}).get("gpus") or []
        md += [f"Host {env.hostname}: {len(gpus)} GPU(s) {', '.join(sorted({g.get('name', '?') for g in gpus}))}"
               f"{', driver ' + str(gpus[0].get('driver')) if gpus and gpus[0].get('driver') else ''}; "
               f"torch {torch.get('version')}, CUDA {torch.get('cuda')}, cuDNN {torch.get('cudnn')}, "
               f"NCCL {torch.get('nccl')}.", ""]
    md += ["## Steps", "", "| step | exit | seconds | first error line |", "|---|---|---|---|"]
    for line in status.read_text().splitlines() if status.exists() else []:
        name, rc, seconds, *error = line.split("\t")
        md.append(f"| {name} | {'ok' if rc == '0' else rc} | {seconds} | {(error or [''])[0]} |")
    peaks = records(results, Peak)
    if peaks:
        md += ["", "## Measured peak (bench peak)", "", "| device | precision | TFLOP/s |", "|---|---|---|"]
        md += [f"| {p.device} | {p.precision} | {p.peak_tflops:.4g} |" for p in peaks]
    if runs:
        md += ["", "## Runs", "", "| mode | model | precision | profile, batch, settings | np | samples/s total | "
               "per GPU | vs reference | MFU measured | MFU spec | W total | J/sample | throttled | GPUs sampled | "
               "traffic check |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(runs, key=lambda r: (r.config.model, r.mode, r.config.precision, r.world_size)):
            c, s, t, u = r.config, r.summary, r.telemetry, r.utilisation
            layout = ["channels-last"] * bool(c.channels_last) + ["data"] * bool(c.data)
            layout += [x for x in [tuning_of(c)] if x]
            mfu_measured, mfu_spec = (u.mfu_measured, u.mfu_spec) if u else (None, None)
            md.append(f"| {r.mode} | {c.model} | {c.precision} | {c.profile or '-'}, batch "
                      f"{c.batch_size}{', ' if layout else ''}{', '.join(layout)} | {r.world_size} | "
                      f"{s.samples_per_sec_total:.1f} | {s.samples_per_sec_per_gpu:.1f} | {_against(r)} | "
                      f"{_f(mfu_measured and 100 * mfu_measured)}% | "
                      f"{_f(mfu_spec and 100 * mfu_spec)}% | {_f(t.power_w_mean_total)} | "
                      f"{_f(t.energy_per_sample_j, '.3g')} | {'-' if t.throttled is None else t.throttled} | "
                      f"{'-' if t.gpus_sampled is None else t.gpus_sampled} of {r.world_size} | {_traffic(r)} |")
    md += anchors_section(runs)
    md += input_section(runs)
    md += data_bench_section(records(results, DataBench))
    md += soak_section(records(results, Soak))
    md += loaders_section(runs)
    md += trace_section(runs)
    md += training_section(runs)
    reference = results / "reference.json"
    if reference.exists():
        md += ["", "## torch-horovod against Horovod's own PyTorch benchmark (alternated)", "",
               "| model | batch | np | bench img/s/rank | reference img/s/rank | ratio median | ratio range |",
               "|---|---|---|---|---|---|---|"]
        for row in json.loads(reference.read_text()):
            ratios = row["ratios"]
            md.append(f"| {row['model']} | {row['batch']} | {row['np']} | {statistics.median(row['bench_rank0']):.1f} "
                      f"| {statistics.median(row['reference']):.1f} | {statistics.median(ratios):.3f} "
                      f"| {min(ratios):.3f}-{max(ratios):.3f} |")
    for v in records(results, Verify):
        md += ["", f"## bench verify: {'PASS' if v.passed else 'FAIL'}", ""]
        md += [f"- {m.mode}: {m.status}{f' ({m.reason})' if m.reason else ''}" for m in v.modes]
    print("\n".join(md))


if __name__ == "__main__":
    main()
