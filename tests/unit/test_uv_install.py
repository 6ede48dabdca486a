"""tools/uv_install.py: tools/setup.sh's installs through uv, with pip's configuration passed on or pip kept."""

from tools.uv_install import parse_config_list, uv_command

CONFIG = """global.cert='/etc/ssl/certs/ca.crt'
global.extra-index-url='file:///a/simple https://b.example/simple'
global.find-links='/opt/wheels'
install.find-links='/opt/other'
download.index-url='https://only-for-download.example'
:env:.default-timeout='180'
:env:.constraint='/etc/pip/constraints.txt'
"""


def test_pip_settings_are_read_as_pip_applies_them_to_an_install():
    assert parse_config_list(CONFIG) == {
        "cert": "/etc/ssl/certs/ca.crt", "extra-index-url": "file:///a/simple https://b.example/simple",
        "find-links": "/opt/other",  # [install] over [global]
        "default-timeout": "180", "constraint": "/etc/pip/constraints.txt"}  # not download's index-url
    assert parse_config_list(":env:.find-links='/x'\nglobal.find-links='/y'\n") == {"find-links": "/x"}


def test_uv_gets_every_setting_that_chooses_the_packages_or_is_not_used(tmp_path):
    python = tmp_path / "bin" / "python"
    assert uv_command(str(python), {}) is None  # no uv in the venv: pip
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "uv").write_text("")
    argv, env = uv_command(str(python), parse_config_list(CONFIG))
    assert argv[:4] == [str(tmp_path / "bin" / "uv"), "pip", "install", "--python"]
    pairs = list(zip(argv[::2], argv[1::2], strict=True))  # flag, value
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's choice across indexes, not uv's first index
    for pair in [("--extra-index-url", "file:///a/simple"), ("--extra-index-url", "https://b.example/simple"),
                 ("--find-links", "/opt/other"), ("--constraint", "/etc/pip/constraints.txt")]:
        assert pair in pairs
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca.crt"
    assert "--no-index" in uv_command(str(python), {"no-index": "true"})[0]
    # a setting uv would not honour the same way: pip installs instead
    assert uv_command(str(python), {"trusted-host": "pypi.example"}) is None
    assert uv_command(str(python), {"no-binary": ":all:"}) is None
