"""The multiproc tier's own fixtures (the fixtures every tier shares: tests/conftest.py)."""

import pytest


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    """Real text as token ids (bench data make --format tokens --from text): Python's help texts, one token per
    byte, 102,400 to train on and 25,600 held out; made once per test process."""
    from bench.data.make import MakeConfig, make

    root = tmp_path_factory.mktemp("tokens") / "t"
    make(MakeConfig(path=str(root), format="tokens", source="text"))
    return root
