"""Domain errors: the CLI turns them into one line on stderr and a non-zero exit code (one_line), and so does a
child process of a command for its parent (Reported)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from bench.deps import missing_message


class BenchError(Exception):
    """A problem the user can fix (bad option, missing dependency, unwritable output, failed rank)."""
    exit_code = 1


class ResultNotWhole(BenchError):
    """The run measured, but its result could not be written where asked, or not all of it: the message says
    what was written where (the record in a fallback folder or on standard error, or the record without its
    results.csv row). A rank exits with this code so that its spawner does not say "no result written"."""
    exit_code = 3



class NotValid(BenchError):
    """The run measured and its result is written, but it failed a check of the run itself (the ranks finished
    with different parameters: the result's sync says so). Exit code 4, so that the spawner says the result was
    written instead of "no result written", and a sweep keeps the cell's result beside its failure."""
    exit_code = 4


class MissingDependency(BenchError):
    """An optional library this command needs is not installed or not built for it (Horovod without the
    framework's support): callers that can go on without it (bench verify: SKIP) catch this type."""


class Reported(BenchError):
    """A failure a child process of this command already put in one line (one_line's words, passed on as they
    are): its parent raises it, so the user reads the line the child would have printed as a command."""

    def __init__(self, line: str, exit_code: int = 1) -> None:
        super().__init__(line)
        self.line = line
        self.exit_code = exit_code


class Stopped(BenchError):
    """The run was ended by a signal (Ctrl-C, SIGTERM from scancel or a time limit, SIGHUP from a closed
    terminal). The CLI exits with 128 + the signal number, as a shell reports a process the signal killed."""

    def __init__(self, signum: int, detail: str = "") -> None:
        self.signum = signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name}" + (f"; {detail}" if detail else ""))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


# The signals that end a run cleanly: Ctrl-C, kill/scancel/time limit, a closed terminal or ssh session.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signum)


def stop_on_signals() -> dict[int, object]:
    """Turn the stop signals into :class:`Stopped` in this (main) thread; returns the old handlers."""
    return {s: signal.signal(s, raise_stopped) for s in STOP_SIGNALS}


def restore_handlers(old: dict[int, object]) -> None:
    for s, handler in old.items():
        signal.signal(s, handler)


# The frameworks' out-of-memory errors, by type name (no framework import here): torch.cuda.OutOfMemoryError,
# TensorFlow's ResourceExhaustedError (an allocation of the GPU's or the host's memory failed).
OOM_ERRORS = {"OutOfMemoryError": "out of GPU memory", "ResourceExhaustedError": "out of memory"}


def summary_line(exc: BaseException) -> str:
    """The informative line of an exception message: TensorFlow's start 'in user code:' and end with the error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1][:300] if lines[0].endswith(":") and len(lines) > 1 else lines[0][:300]


def out_of_memory(exc: BaseException) -> str | None:
    """One line for a framework's out-of-memory error: what ran out, the framework's own words, what to try."""
    what = next((OOM_ERRORS[t.__name__] for t in type(exc).__mro__ if t.__name__ in OOM_ERRORS), None)
    if what is None:
        return None
    return f"{what} ({summary_line(exc)[:200]}): try a smaller --batch-size, or --precision amp-bf16"


def one_line(exc: BaseException) -> tuple[str, int]:
    """The line a command prints for an exception that ends it (without a rank's prefix), and its exit code: a
    domain error's message, a missing optional dependency and what installs it, a framework's out-of-memory
    error and what to try; anything else is an internal error named by its type (HVDBENCH_DEBUG=1 lets the
    traceback through instead, where the caller re-raises)."""
    if isinstance(exc, Reported):
        return exc.line, exc.exit_code
    if isinstance(exc, BenchError):
        return f"error: {exc}", exc.exit_code
    message = missing_message(exc) if isinstance(exc, ModuleNotFoundError) else out_of_memory(exc)
    if message:
        return f"error: {message}", 1
    return (f"internal error: {type(exc).__name__}: {summary_line(exc)} (HVDBENCH_DEBUG=1 shows the traceback)",
            1)


# Exit statuses as Nagios-style monitors read them (Meta's GCM's health checks too): `--exit-codes nagios` on the
# commands that judge a node (preflight, diagnose).
EXIT_CODES = ("bench", "nagios")
NAGIOS_OK, NAGIOS_WARNING, NAGIOS_CRITICAL, NAGIOS_UNKNOWN = 0, 1, 2, 3


def nagios(errors: int, warnings: int) -> int:
    """0 with neither, 1 with warnings only, 2 with an error."""
    return NAGIOS_CRITICAL if errors else NAGIOS_WARNING if warnings else NAGIOS_OK


def check_exit_codes(value: str) -> None:
    if value not in EXIT_CODES:
        raise BenchError(f"--exit-codes takes {' or '.join(EXIT_CODES)} (got '{value}')")


def judged(main: Callable[[], int], exit_codes: str) -> int:
    """``main``'s status; with nagios, a command that could not judge (its one-line error, printed as every error
    is) is 3, unknown, instead of 1; a stop signal stays its own status."""
    if exit_codes != "nagios":
        return main()
    try:
        return main()
    except Stopped:
        raise  # a stop is the signal's status, as every command's
    except BenchError as exc:
        line, _ = one_line(exc)
        print(line, file=sys.stderr)
        return NAGIOS_UNKNOWN
