"""Optional dependencies: which ``pip install '.[extra]'`` brings a module bench could not import.

The extras are declared in pyproject.toml: ``torch``, ``tf``, ``gpu``, ``report``, ``data``, ``dali``, ``history``,
``mlflow`` and ``dev``.
Horovod is not among them: it is built from source with this project's patch (``make venv``, or the images).
"""

from __future__ import annotations

EXTRA_OF = {"torch": "torch", "numpy": "torch", "tensorflow": "tf", "tf_keras": "tf", "pynvml": "gpu",
            "matplotlib": "report", "docker": "dev", "spython": "dev", "pytest": "dev", "PIL": "data",
            "sklearn": "data", "nvidia": "dali", "sqlalchemy": "history", "psycopg": "history",
            "prometheus_client": "history", "mlflow": "mlflow"}


def install_hint(module: str | None) -> str | None:
    """The command that installs ``module`` (a top-level name), or None for a module bench does not know."""
    top = (module or "").split(".")[0]
    if top == "horovod":
        return "Horovod is built with this project's patch: 'make venv', or use the hvdbench image"
    extra = EXTRA_OF.get(top)
    return f"pip install '.[{extra}]' in the hvdbench checkout" if extra else None


def missing_message(exc: ModuleNotFoundError) -> str | None:
    hint = install_hint(exc.name)
    return f"{exc.name.split('.')[0]} is not installed; {hint}" if hint else None
