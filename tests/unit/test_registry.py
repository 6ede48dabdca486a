"""A new mode and a new model, registered from a plugin and nowhere else, reach every command.

tests/plugins/toy_plugin.py registers ``torch-toy`` (a distributed PyTorch mode), ``toy-mlp`` (a model
in both frameworks) and ``--toy-lr-scale`` (a run option). With HVDBENCH_PLUGINS naming it, bench, sweep,
report, verify and predict all see them: no other file knows they exist.
"""


import pytest


def test_the_mode_facts_come_from_the_spec():
    """What report, verify, sweep and predict ask a mode, answered by its ModeSpec."""
    from bench.modes import MODES, single_of, variant, variants

    assert variant("tf-native").label == "tf-native:multiworker"  # the default strategy
    assert variant("tf-native:ps").verify_np == 1 and variant("tf-native:mirrored").verify_np is None
    assert variant("torch-horovod").allreduce == "horovod-torch" and variant("tf-native:ps").allreduce is None
    assert MODES["tf-horovod"].peer == "tf-native" and MODES["tf-horovod"].needs_mpi
    assert single_of("torch").name == "torch-single"
    assert [v.label for v in variants("tensorflow", distributed=True)] == [
        "tf-horovod", "tf-native:multiworker", "tf-native:mirrored", "tf-native:ps"]


@pytest.mark.parametrize("command, cls, run_options", [
    ("verify", "bench.commands.verify:VerifyConfig", None),
    ("allreduce", "bench.commands.allreduce:AllreduceConfig", None),
    ("diagnose", "bench.commands.diagnose:DiagnoseConfig", None),
    ("models", "bench.commands.info:ModelsConfig", None),
    ("env", "bench.commands.info:EnvConfig", None),
    ("schema", "bench.commands.info:SchemaConfig", None),
    ("run", "bench.commands.run_file:RunFileConfig", None),
    ("sweep", "bench.commands.sweep:SweepConfig", "sweep"),
    ("converge", "bench.commands.converge:ConvergeConfig", "sweep"),
    ("k8s", "bench.commands.kubernetes:K8sConfig", "all"),
])
def test_a_commands_flags_are_its_configurations_declarations(command, cls, run_options):
    """Gate issue, item 3: verify, allreduce and diagnose restated their configurations field by field in the CLI
    (about 49 fields written twice, defaults included), and sweep, k8s, models, env, schema and run declared theirs
    in cli.py. Each command's flags now come from its configuration's declarations alone (with the run options, as
    RunConfig declares them, for the commands that start runs): the same names, and each shown default reads back
    as the field's default."""
    import dataclasses
    import importlib

    import typer.main

    from bench.cli import app
    from bench.config import declared, option_specs

    module, _, name = cls.partition(":")
    config = getattr(importlib.import_module(module), name)
    click = typer.main.get_command(app).commands[command]
    params = {p.name: p for p in click.params}
    options = declared(config)
    run = {name for name, *_, how in option_specs() if how.sweep or run_options == "all"} if run_options else set()
    assert set(params) == {n for n, *_ in options} | run
    for field_name, _, default, how in options:
        if how.argument and default in ("", None):
            assert params[field_name].required, field_name  # a required argument: no default to show
            continue
        shown = params[field_name].default
        assert (how.parse(shown) if how.parse and isinstance(shown, str) else shown) == default, field_name
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    assert all(defaults[n] == d for n, _, d, _ in options)
