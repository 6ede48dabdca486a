"""Domain errors: the CLI turns them into one line on stderr and a non-zero exit code."""

import signal


class BenchError(Exception):
    """A problem the user can fix (bad option, missing dependency, unwritable output, failed rank)."""
    exit_code = 1


class ResultNotWhole(BenchError):
    """The run measured, but its result could not be written where asked, or not all of it: the message says
    what was written where (the record in a fallback folder or on standard error, or the record without its
    results.csv row). A rank exits with this code so that its spawner does not say "no result written"."""
    exit_code = 3



class MissingDependency(BenchError):
    """An optional library this command needs is not installed or not built for it (Horovod without the
    framework's support): callers that can go on without it (bench verify: SKIP) catch this type."""


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
