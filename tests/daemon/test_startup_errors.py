"""A bad set-up makes the real `sclated` process print one line and exit 2.

Each case runs `python -m sclated` with something a user can get wrong (the
tokens file, the config file, a flag, what they point at) and checks that
stderr is exactly one line naming the file (and line, where there is one) and
the problem, with no traceback. The processes run in parallel threads: each
takes about a second to import and fail.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sclated.daemon import Daemon, DaemonConfig
from sclated.errors import ConfigError
from tests.api.test_tls import _self_signed

GOOD_TOKEN = "tok-alice-0123456789abcdef"


@dataclass(frozen=True)
class Case:
    args: list[str]
    where: str
    """The file (or address) the line must start with."""
    line: int | None
    problem: str


@dataclass
class Setup:
    """What a case builds in its own directory."""

    base: Path
    port: int
    """A port some socket is listening on."""
    read_only: list[Path]
    """Directories made read-only (undone at the end)."""

    @property
    def state(self) -> str:
        return str(self.base / "state")

    def write(self, name: str, text: str) -> Path:
        path = self.base / name
        path.write_text(text)
        return path

    def regular_file(self) -> Path:
        return self.write("a-file", "not a directory\n")

    def make_read_only(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            # Root ignores permission bits, but not the immutable attribute.
            subprocess.run(["chattr", "+i", str(path)], check=True)
        else:
            path.chmod(0o555)
        self.read_only.append(path)
        return path


def _daemon(s: Setup, *extra: str) -> list[str]:
    return ["--state-dir", s.state, "--listen", "127.0.0.1:0", *extra]


def _tokens(text: str, line: int | None, problem: str) -> Callable[[Setup], Case]:
    def build(s: Setup) -> Case:
        path = s.write("tokens", text)
        return Case(_daemon(s, "--tokens-file", str(path)), str(path), line, problem)

    return build


def _config(text: str, line: int | None, problem: str) -> Callable[[Setup], Case]:
    def build(s: Setup) -> Case:
        path = s.write("sclated.toml", text.replace("STATE", s.state))
        return Case(["--config", str(path)], str(path), line, problem)

    return build


def _tokens_unreadable(s: Setup) -> Case:
    path = s.base / "tokens.d"
    path.mkdir()
    return Case(_daemon(s, "--tokens-file", str(path)), str(path), None, "cannot read the tokens file: Is a directory")


def _tokens_missing(s: Setup) -> Case:
    path = s.base / "no-tokens"
    return Case(
        _daemon(s, "--tokens-file", str(path)),
        str(path),
        None,
        "cannot read the tokens file: No such file or directory",
    )


def _config_missing(s: Setup) -> Case:
    path = s.base / "missing.toml"
    return Case(["--config", str(path)], str(path), None, "cannot read the config file: No such file or directory")


def _flag_bad_listen(s: Setup) -> Case:
    args = ["--state-dir", s.state, "--listen", "127.0.0.1:99999"]
    return Case(args, "listen '127.0.0.1:99999'", None, "must be HOST:PORT")


def _flag_key_without_cert(s: Setup) -> Case:
    key = s.write("tls.key", "")
    return Case(_daemon(s, "--tls-key", str(key)), "tls_key", None, "tls_key is set without tls_cert")


def _tls(cert_text: str | None, key_text: str | None, bad: str, problem: str) -> Callable[[Setup], Case]:
    """A certificate and key, each good (None) or replaced by the given text; ``bad`` names the wrong one."""

    def build(s: Setup) -> Case:
        cert, key = _self_signed(s.base)
        if cert_text is not None:
            cert.write_text(cert_text)
        if key_text is not None:
            key.write_text(key_text)
        args = _daemon(s, "--tls-cert", str(cert), "--tls-key", str(key))
        return Case(args, str(cert if bad == "cert" else key), None, problem)

    return build


def _tls_cert_missing(s: Setup) -> Case:
    _, key = _self_signed(s.base)
    cert = s.base / "missing.crt"
    args = _daemon(s, "--tls-cert", str(cert), "--tls-key", str(key))
    return Case(args, str(cert), None, "cannot read the TLS certificate: No such file or directory")


def _tls_key_of_another_cert(s: Setup) -> Case:
    other = s.base / "other"
    other.mkdir()
    cert, _ = _self_signed(s.base)
    _, key = _self_signed(other)
    args = _daemon(s, "--tls-cert", str(cert), "--tls-key", str(key))
    return Case(args, str(key), None, f"not the private key of the certificate '{cert}'")


def _state_dir_under_a_file(s: Setup) -> Case:
    state = s.regular_file() / "state"
    args = ["--state-dir", str(state), "--listen", "127.0.0.1:0"]
    return Case(args, str(state), None, "cannot create the state directory: Not a directory")


def _state_dir_is_a_file(s: Setup) -> Case:
    state = s.regular_file()
    args = ["--state-dir", str(state), "--listen", "127.0.0.1:0"]
    return Case(args, str(state), None, "the state directory is not a directory")


def _state_dir_read_only(s: Setup) -> Case:
    state = s.make_read_only(s.base / "state")
    return Case(_daemon(s), str(state), None, "cannot write in the state directory")


def _port_in_use(s: Setup) -> Case:
    listen = f"127.0.0.1:{s.port}"
    args = ["--state-dir", s.state, "--listen", listen]
    return Case(args, f"listen '{listen}'", None, "address already in use")


def _unix_socket_too_long(s: Setup) -> Case:
    path = s.base / ("s" * 120 + ".sock")
    size = len(os.fsencode(path))
    return Case(
        _daemon(s, "--unix-socket", str(path)),
        str(path),
        None,
        f"the unix socket path is {size} bytes long; the system allows at most 107",
    )


def _unix_socket_dir_cannot_be_created(s: Setup) -> Case:
    parent = s.regular_file()
    path = parent / "run" / "sclated.sock"
    return Case(
        _daemon(s, "--unix-socket", str(path)),
        str(path),
        None,
        f"cannot create the unix socket's directory '{parent / 'run'}': Not a directory",
    )


def _unix_socket_dir_read_only(s: Setup) -> Case:
    run = s.make_read_only(s.base / "run")
    path = run / "sclated.sock"
    return Case(
        _daemon(s, "--unix-socket", str(path)), str(path), None, f"cannot write in the unix socket's directory '{run}'"
    )


def _unix_socket_path_is_a_file(s: Setup) -> Case:
    path = s.write("sclated.sock", "a file of the user's\n")
    return Case(_daemon(s, "--unix-socket", str(path)), str(path), None, "exists and is not a socket")


def _data_root_missing(s: Setup) -> Case:
    root = s.base / "no-data"
    return Case(_daemon(s, "--data-root", str(root)), str(root), None, "the data root does not exist")


def _data_root_is_a_file(s: Setup) -> Case:
    root = s.regular_file()
    return Case(_daemon(s, "--data-root", str(root)), str(root), None, "the data root is not a directory")


def _data_root_in_the_state_dir(s: Setup) -> Case:
    root = s.base / "state" / "runs"
    root.mkdir(parents=True)
    return Case(_daemon(s, "--data-root", str(root)), str(root), None, "the data root is inside the state directory")


def _data_root_symlink_into_the_state_dir(s: Setup) -> Case:
    (s.base / "state").mkdir()
    root = s.base / "data"
    root.symlink_to(s.base / "state")
    return Case(_daemon(s, "--data-root", str(root)), str(root), None, "the data root is inside the state directory")


def _tenant_data_root_missing(s: Setup) -> Case:
    root = s.base / "no-alice"
    args = _daemon(s, "--tenant-data-root", f"alice={root}")
    return Case(args, str(root), None, "the data root does not exist")


CASES: dict[str, Callable[[Setup], Case]] = {
    "tokens-short-token": _tokens(
        f"{GOOD_TOKEN} alice\n# bob's, too short:\ntooShortXyz bob\n", 3, "token shorter than 16 characters"
    ),
    "tokens-field-count": _tokens(f"\n{GOOD_TOKEN} alice extra\n", 2, "expected 'TOKEN TENANT', got 3 fields"),
    "tokens-one-field": _tokens(f"{GOOD_TOKEN}\n", 1, "expected 'TOKEN TENANT', got 1 field"),
    "tokens-bad-tenant": _tokens(f"{GOOD_TOKEN} al/ice\n", 1, "tenant 'al/ice' must be 1-64 of [A-Za-z0-9._-]"),
    "tokens-duplicate": _tokens(
        f"{GOOD_TOKEN} alice\n{GOOD_TOKEN}-bob bob\n{GOOD_TOKEN} carol  # again\n",
        3,
        "token listed twice (first on line 1)",
    ),
    "tokens-unreadable": _tokens_unreadable,
    "tokens-missing": _tokens_missing,
    "config-missing": _config_missing,
    "config-not-toml": _config('state_dir = "STATE"\nmax_running = = 3\n', 2, "not valid TOML: Invalid value"),
    "config-unknown-key": _config(
        'state_dir = "STATE"\nlisten = "127.0.0.1:0"\ncolour = "blue"\n', 3, "unknown key 'colour'"
    ),
    "config-wrong-type": _config(
        'state_dir = "STATE"\n\nmax_running = "many"\n', 3, "max_running must be an integer, got 'many'"
    ),
    "config-wrong-type-bool": _config('state_dir = "STATE"\nreports = "yes"\n', 2, "reports must be true or false"),
    "config-path-not-a-string": _config("state_dir = 5\n", 1, "state_dir must be a path (a non-empty string), got 5"),
    "config-out-of-range": _config('state_dir = "STATE"\nmax_running = 0\n', 2, "max_running must be at least 1"),
    "config-model-context-out-of-range": _config(
        'state_dir = "STATE"\nmodel_n_ctx = 100\n', 2, "model_n_ctx must be in [256, 131072], got 100"
    ),
    "config-bad-listen": _config('state_dir = "STATE"\nlisten = "localhost"\n', 2, "listen 'localhost' must be"),
    "config-not-loopback": _config(
        'state_dir = "STATE"\nlisten = "0.0.0.0:0"\n', 2, "listen '0.0.0.0:0' is not a loopback address"
    ),
    "config-tls-cert-without-key": _config(
        'state_dir = "STATE"\nlisten = "127.0.0.1:0"\ntls_cert = "/etc/ssl/sclated.crt"\n',
        3,
        "tls_cert is set without tls_key",
    ),
    "config-data-root-relative": _config(
        'state_dir = "STATE"\ndata_roots = ["/srv", "data"]\n', 2, "data root 'data' is not an absolute path"
    ),
    "config-data-roots-not-a-list": _config(
        'state_dir = "STATE"\ndata_roots = "/srv"\n', 2, "data_roots must be a list of paths"
    ),
    "config-tenant-data-root-relative": _config(
        'state_dir = "STATE"\n\n[tenant_data_roots]\nalice = ["alice"]\n',
        3,
        "data root 'alice' of tenant 'alice' is not an absolute path",
    ),
    "config-tenant-data-roots-bad-tenant": _config(
        'state_dir = "STATE"\n[tenant_data_roots]\n"al/ice" = ["/srv"]\n',
        2,
        "tenant 'al/ice' must be 1-64 of [A-Za-z0-9._-]",
    ),
    "flag-tenant-data-root-no-tenant": lambda s: Case(
        _daemon(s, "--tenant-data-root", "/srv"), "tenant_data_roots", None, "expected TENANT=DIR, got '/srv'"
    ),
    "data-root-missing": _data_root_missing,
    "data-root-is-a-file": _data_root_is_a_file,
    "data-root-in-the-state-dir": _data_root_in_the_state_dir,
    "data-root-symlink-into-the-state-dir": _data_root_symlink_into_the_state_dir,
    "tenant-data-root-missing": _tenant_data_root_missing,
    "flag-bad-listen": _flag_bad_listen,
    "flag-tls-key-without-cert": _flag_key_without_cert,
    "tls-cert-missing": _tls_cert_missing,
    "tls-cert-not-pem": _tls("not a certificate\n", None, "cert", "not a PEM certificate"),
    "tls-key-not-pem": _tls(None, "-----BEGIN PRIVATE KEY-----\nAAAA\n", "key", "not an unencrypted PEM private key"),
    "tls-key-of-another-cert": _tls_key_of_another_cert,
    "state-dir-under-a-file": _state_dir_under_a_file,
    "state-dir-is-a-file": _state_dir_is_a_file,
    "state-dir-read-only": _state_dir_read_only,
    "port-in-use": _port_in_use,
    "unix-socket-too-long": _unix_socket_too_long,
    "unix-socket-dir-cannot-be-created": _unix_socket_dir_cannot_be_created,
    "unix-socket-dir-read-only": _unix_socket_dir_read_only,
    "unix-socket-path-is-a-file": _unix_socket_path_is_a_file,
}


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[Case, subprocess.CompletedProcess[str]]]]:
    root = tmp_path_factory.mktemp("startup")
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        read_only: list[Path] = []
        cases: dict[str, Case] = {}
        for name, build in CASES.items():
            (root / name).mkdir()
            cases[name] = build(Setup(root / name, busy.getsockname()[1], read_only))

        def run(case: Case) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "sclated", *case.args], capture_output=True, text=True, timeout=60
            )

        try:
            with ThreadPoolExecutor(max_workers=4) as pool:
                results = dict(zip(cases, pool.map(run, cases.values()), strict=True))
            yield {name: (cases[name], results[name]) for name in cases}
        finally:
            for path in read_only:
                if os.geteuid() == 0:
                    subprocess.run(["chattr", "-i", str(path)], check=True)
                else:
                    path.chmod(0o755)


@pytest.mark.parametrize("name", list(CASES))
def test_one_line_naming_file_and_problem_then_exit_2(
    name: str, outcomes: dict[str, tuple[Case, subprocess.CompletedProcess[str]]]
) -> None:
    case, done = outcomes[name]
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.returncode == 2, done.stderr
    line = lines[0]
    where = f"sclated: {case.where}"
    if case.line is not None:
        where += f", line {case.line}"
    assert line.startswith(where), (line, where)
    assert case.problem in line, (line, case.problem)
    assert done.stdout == ""


def test_the_toml_error_names_line_and_column(
    outcomes: dict[str, tuple[Case, subprocess.CompletedProcess[str]]],
) -> None:
    case, done = outcomes["config-not-toml"]
    assert done.stderr == f"sclated: {case.where}, line 2, column 15: not valid TOML: Invalid value\n"


def test_a_token_is_never_printed(outcomes: dict[str, tuple[Case, subprocess.CompletedProcess[str]]]) -> None:
    for name in ("tokens-short-token", "tokens-field-count", "tokens-one-field", "tokens-duplicate"):
        _, done = outcomes[name]
        assert GOOD_TOKEN not in done.stderr and "tooShortXyz" not in done.stderr, done.stderr


async def test_an_address_taken_after_the_checks_is_a_config_error(tmp_path: Path) -> None:
    # check_startup saw the port free; another process takes it before the daemon binds.
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        listen = f"127.0.0.1:{busy.getsockname()[1]}"
        d = Daemon(DaemonConfig(state_dir=tmp_path / "s", listen=listen, unix_socket="-"))
        try:
            with pytest.raises(ConfigError, match=r"listen '127\.0\.0\.1:\d+': cannot listen there"):
                await d.start()
        finally:
            with contextlib.suppress(Exception):
                await d.stop()
