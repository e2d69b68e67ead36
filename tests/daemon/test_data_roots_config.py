"""data_roots and tenant_data_roots: from the config file and the flags, into the daemon's DataRoots."""

from __future__ import annotations

from pathlib import Path

from sclated.daemon import DaemonConfig, build_parser, check_startup, data_roots_for, load_config
from sclated.doctor import check_data_roots_in_effect
from sclated.runs import default_registry


def _load(*argv: str) -> DaemonConfig:
    return load_config(build_parser().parse_args(list(argv)))


def test_the_keys_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "sclated.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n'
        'data_roots = ["/srv/data", "/work/shared/data"]\n'
        "[tenant_data_roots]\n"
        'alice = ["/srv/alice"]\n'
        'bob = ["/srv/bob", "/srv/shared-with-bob"]\n'
    )
    cfg = _load("--config", str(config))
    assert cfg.data_roots == (Path("/srv/data"), Path("/work/shared/data"))
    assert cfg.effective_data_roots == cfg.data_roots
    assert cfg.tenant_data_roots == {
        "alice": (Path("/srv/alice"),),
        "bob": (Path("/srv/bob"), Path("/srv/shared-with-bob")),
    }
    # Flags win, as for every key.
    cfg = _load("--config", str(config), "--data-root", "/a", "--data-root", "/b", "--tenant-data-root", "carol=/c")
    assert cfg.data_roots == (Path("/a"), Path("/b"))
    assert cfg.tenant_data_roots == {"carol": (Path("/c"),)}


def test_the_default_is_the_state_directorys_data(tmp_path: Path) -> None:
    cfg = _load("--state-dir", str(tmp_path / "state"))
    assert cfg.data_roots == () and cfg.tenant_data_roots == {}
    assert cfg.effective_data_roots == (tmp_path / "state" / "data",)


def test_a_root_may_be_a_symlink_and_may_hold_the_state_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    cfg = _load(
        "--state-dir",
        str(state),
        "--listen",
        "127.0.0.1:0",
        "--unix-socket",
        "-",
        "--data-root",
        str(tmp_path / "link"),
        "--data-root",
        str(tmp_path),
        "--data-root",
        str(state / "data"),
    )
    check_startup(cfg)
    roots = data_roots_for(cfg, default_registry().builtin_data())
    assert roots.default == (real, tmp_path, state / "data")
    assert state in roots.fences
    assert roots.resolve(str(tmp_path / "link" / "x"), "local", "f") == real / "x"


def test_the_doctor_reports_the_roots_in_effect(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    config = tmp_path / "sclated.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\ndata_roots = ["{shared}"]\n[tenant_data_roots]\nalice = ["{shared}"]\n'
    )
    check, roots = check_data_roots_in_effect(config)
    assert check.ok and str(shared) in check.detail
    assert roots is not None
    assert roots["default"] == [str(shared)] and roots["tenants"] == {"alice": [str(shared)]}
    assert str(tmp_path / "state") in roots["never"] and roots["builtin"]
    # Only a state directory: its data/ is the root.
    check, roots = check_data_roots_in_effect(state_dir=tmp_path / "state")
    assert check.ok and roots is not None and roots["default"] == [str(tmp_path / "state" / "data")]
    # A root the daemon would refuse to start with fails the check, naming it.
    check, roots = check_data_roots_in_effect(state_dir=tmp_path / "state", data_roots=[tmp_path / "missing"])
    assert not check.ok and roots is None
    assert check.detail == f"{tmp_path / 'missing'}: the data root does not exist"


def test_the_example_configuration_parses_with_its_roots_uncommented(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "systemd" / "sclated.toml"
    text = example.read_text().replace("/var/lib/sclated", str(tmp_path / "state"))
    for commented in ("# data_roots =", "# [tenant_data_roots]", "# alice ="):
        assert commented in text
        text = text.replace(commented, commented[2:])
    config = tmp_path / "sclated.toml"
    config.write_text(text)
    cfg = _load("--config", str(config))
    assert cfg.data_roots == (Path("/work/shared/data"),)
    assert cfg.tenant_data_roots == {"alice": (Path("/srv/sclate/alice"),)}
