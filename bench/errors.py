"""Domain errors: the CLI turns them into one line on stderr and exit code 1."""


class BenchError(Exception):
    """A problem the user can fix (bad option, missing dependency, unwritable output, failed rank)."""
