"""Deadlock guards: how long a multiproc test waits for what it waits for before it fails.

These tests assert events and their order (a line written, an exit code, every process gone), never how fast a
step was: a bound that an idle machine meets and a busy one breaks fails the gate for the wrong reason (CI shares
the machine with whatever else runs). What a test waits for comes in seconds on an idle machine and in under a
minute on one whose cores are busy with other work (tools/compete.py runs the tier beside such work); a guard only
turns a hang into a failure instead of a stalled gate, so each is minutes. Where a test's point is that something
ends without waiting (a refused rendezvous, a lost rank), its wrong outcome is made to take longer than the guard
(a long --rendezvous-timeout, a run of 100,000 windows): the guard then tells the two apart on any machine.
"""

# a bench process reaching what the test waits for: its ranks started, a window or epoch line written
START_S = 300
# a process ending once what ends it was done (a signal, a killed rank, a refused rendezvous), and all it started
# being gone
END_S = 300
