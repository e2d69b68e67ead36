"""The executor keys: executor, ray_address, ray_placement, cluster_snapshot_dir."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sclated.daemon import DaemonConfig, build_parser, load_config
from sclated.daemon._config import check_executor
from sclated.errors import ConfigError


def _config(tmp_path: Path, *flags: str) -> DaemonConfig:
    return load_config(build_parser().parse_args(["--state-dir", str(tmp_path), *flags]))


def test_local_is_the_default(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config.executor == "local" and config.ray_address == ""


def test_flags_and_file_keys(tmp_path: Path) -> None:
    config = _config(tmp_path, "--executor", "ray", "--ray-address", "10.0.0.1:6379", "--ray-placement", "pack")
    assert (config.executor, config.ray_address, config.ray_placement) == ("ray", "10.0.0.1:6379", "pack")
    toml = tmp_path / "sclated.toml"
    toml.write_text('executor = "ray"\nray_address = "auto"\ncluster_snapshot_dir = "/shared/snapshots"\n')
    config = load_config(build_parser().parse_args(["--state-dir", str(tmp_path), "--config", str(toml)]))
    assert config.ray_address == "auto" and config.cluster_snapshot_dir == Path("/shared/snapshots")


@pytest.mark.parametrize(
    ("flags", "field", "words"),
    [
        (("--executor", "k8s"), "executor", "is not one of local, ray"),
        (("--executor", "ray"), "ray_address", "ray_address is empty"),
        (("--ray-address", "h:1"), "ray_address", "set executor = 'ray'"),
        (("--executor", "ray", "--ray-address", "h:1", "--ray-placement", "random"), "ray_placement", "spread"),
        (
            ("--executor", "ray", "--ray-address", "h:1", "--cluster-snapshot-dir", "rel"),
            "cluster_snapshot_dir",
            "absolute",
        ),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, flags: tuple[str, ...], field: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        _config(tmp_path, *flags)
    assert err.value.field == field


def test_a_snapshot_dir_that_is_not_there(tmp_path: Path) -> None:
    config = _config(
        tmp_path, "--executor", "ray", "--ray-address", "h:1", "--cluster-snapshot-dir", str(tmp_path / "nope")
    )
    with pytest.raises(ConfigError, match="not a directory") as err:
        check_executor(config)
    assert err.value.field == "cluster_snapshot_dir"


def test_ray_missing_says_how_to_install_it(tmp_path: Path) -> None:
    # A real interpreter in which Ray cannot be found: a finder in front of the others hides it.
    script = f"""
import importlib.abc, importlib.machinery, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Hide())
from sclated.daemon import DaemonConfig, build_parser, load_config
from sclated.daemon._config import check_executor
from sclated.errors import ConfigError
args = ["--state-dir", {str(tmp_path)!r}, "--executor", "ray", "--ray-address", "h:1"]
c = load_config(build_parser().parse_args(args))
try:
    check_executor(c)
except ConfigError as e:
    print(e.field, "|", e.problem)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("executor |") and "pip install 'sclated[ray]'" in out.stdout


def test_an_unreachable_cluster_fails_the_start_at_once(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("sclated")
    args = ["--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0", "--executor", "ray"]
    out = subprocess.run(
        [str(exe), *args, "--ray-address", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert f"cannot reach the Ray cluster's head at ray_address '127.0.0.1:{port}'" in out.stderr + out.stdout
