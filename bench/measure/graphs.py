"""--compile, --xla: the graphs the compiler compiled, counted where they should not be (a tracker,
bench.measure.tracker).

The compiler's own counter (the trainer's ``compiled_graphs``: TorchDynamo's frames, XLA's compilations) is read
before the first step, after it, before the windows and around each window's clock: the first step compiles (its
count is expected to be 1 or more); a graph compiled in the untimed steps after it moved compile_s's compiled step;
one compiled inside a window's clock was timed. An evaluation between two windows compiles its own graphs (eval
mode, no gradients), outside the clocks, and is not counted. The counts fill the result's ``timing`` section
(graphs_compiled_in_first_step, _in_warmup, _in_windows), where they have always been.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bench.measure.tracker import Ranks, Tracker, register


class Compiled(BaseModel):
    """One run's compiled-graph counts (the fewest first-step count on any rank; the most elsewhere)."""
    graphs_compiled_in_first_step: int | None = None
    graphs_compiled_in_warmup: int | None = None
    graphs_compiled_in_windows: int | None = None


@register
class Graphs(Tracker):
    name = "graphs"
    field = "timing"
    model = Compiled

    @classmethod
    def wanted(cls, ctx) -> bool:
        """A trainer whose compiler counts (its counter is None where nothing compiles)."""
        count = getattr(ctx.trainer, "compiled_graphs", None)
        return count is not None and count() is not None

    def started(self) -> None:
        self.count = self.ctx.trainer.compiled_graphs
        self.at_start = self.count()
        self.in_windows = 0

    def first_step_done(self) -> None:
        self.after_first = self.count()

    def before_windows(self) -> None:
        self.before = self.count()

    def before_window(self) -> None:
        self.window_start = self.count()

    def after_window(self) -> None:
        self.in_windows += self.count() - self.window_start

    def part(self) -> dict[str, int]:
        return {"first_step": self.after_first - self.at_start, "warmup": self.before - self.after_first,
                "windows": self.in_windows}

    @classmethod
    def section(cls, job: Ranks) -> Compiled | None:
        parts = job.parts(cls.name)
        if all(p is None for p in parts):
            return None

        def most(when: str, fewest: bool = False) -> int:
            return (min if fewest else max)((p or {}).get(when, 0) for p in parts)
        return Compiled(graphs_compiled_in_first_step=most("first_step", fewest=True),
                        graphs_compiled_in_warmup=most("warmup"), graphs_compiled_in_windows=most("windows"))

    @classmethod
    def place(cls, fields: dict[str, Any], section: BaseModel | None) -> None:
        """Into the ``timing`` section's fields (a dict while the result is assembled), as before there were
        trackers: null where nothing compiles."""
        fields["timing"].update((section or Compiled()).model_dump())

    @classmethod
    def read(cls, result: Any) -> Compiled:
        t = result.timing
        return Compiled(graphs_compiled_in_first_step=t.graphs_compiled_in_first_step,
                        graphs_compiled_in_warmup=t.graphs_compiled_in_warmup,
                        graphs_compiled_in_windows=t.graphs_compiled_in_windows)

    @classmethod
    def warning(cls, section: Compiled, result: Any) -> str | None:
        return compile_warning(result)


def compile_warning(result: Any) -> str | None:
    """One line when a compiled run compiled graphs where it should not have: inside the timed windows (their time
    holds the compilation), in the untimed steps after the first (compile_s was taken against a step that
    compiled) or inside the attribution's timed steps; else None."""
    apart = result.attribution.per_rank if result.attribution is not None else None
    where = [(result.timing.graphs_compiled_in_windows, "the timed windows (the throughput includes it)"),
             (result.timing.graphs_compiled_in_warmup, "the warmup steps (compile_s is short by it)"),
             (max((p.graphs_compiled or 0 for p in apart), default=0) if apart else None,
              "the attribution's timed steps (compute_s or exchange_s includes it)")]
    found = [f"{n} in {place}" for n, place in where if n]
    if not found:
        return None
    return (f"warning: graphs were compiled after the first step: {'; '.join(found)}. A shape or guard changed "
            "between steps (PyTorch: TORCH_LOGS=recompiles names it; docs/profiles.md)")
