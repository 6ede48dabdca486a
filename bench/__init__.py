"""hvdbench: distributed data-parallel training throughput, Horovod against the frameworks' own stacks."""

__version__ = "0.1.0"
SCHEMA_VERSION = 3
