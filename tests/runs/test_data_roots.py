"""DataRoots: which host paths a tenant's runs may name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from adapters import BenchmarkInfo
from sclated.errors import InvalidArgument, PermissionDenied
from sclated.runs import DataRoots, RunSpec, default_registry


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A shared root, alice's own root, a state directory (with its data root) and a secret outside."""
    paths = {
        "shared": tmp_path / "shared",
        "alice": tmp_path / "shared" / "alice-only",
        "state": tmp_path / "state",
        "secret": tmp_path / "secret",
    }
    for p in paths.values():
        p.mkdir(parents=True)
    (paths["state"] / "data").mkdir()
    (paths["state"] / "runs" / "bob" / "run-1").mkdir(parents=True)
    (paths["secret"] / "key").write_text("hunter2")
    (paths["shared"] / "bench").mkdir()
    return paths


def _roots(tree: dict[str, Path]) -> DataRoots:
    return DataRoots.build(
        default=(tree["shared"], tree["state"] / "data"),
        tenants={"alice": (tree["alice"],)},
        fences=(tree["state"],),
    )


def _denied(roots: DataRoots, path: str, tenant: str = "bob", field: str = "run.benchmark.data_dir") -> str:
    with pytest.raises(PermissionDenied) as info:
        roots.resolve(path, tenant, field)
    assert info.value.field == field
    assert info.value.reason == "PERMISSION_DENIED"
    return info.value.message


def test_a_path_inside_a_root_is_resolved(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    assert roots.resolve(str(tree["shared"] / "bench"), "bob", "f") == tree["shared"] / "bench"
    # Not there yet is fine: the adapter's own error says so, inside the root.
    assert roots.resolve(str(tree["shared"] / "later"), "bob", "f") == tree["shared"] / "later"
    assert roots.resolve(str(tree["state"] / "data" / "x"), "bob", "f") == tree["state"] / "data" / "x"


def test_dotdot_out_of_a_root_is_refused(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    _denied(roots, f"{tree['shared']}/bench/../../secret")
    _denied(roots, f"{tree['shared']}/../secret/key")
    # Staying inside is fine.
    assert roots.resolve(f"{tree['shared']}/bench/../bench", "bob", "f") == tree["shared"] / "bench"


def test_an_absolute_path_outside_is_refused(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    _denied(roots, "/etc")
    _denied(roots, str(tree["secret"] / "key"))
    _denied(roots, "/")


def test_a_relative_path_is_invalid(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    for text in ("bench", "../secret", ""):
        with pytest.raises(InvalidArgument) as info:
            roots.resolve(text, "bob", "run.benchmark.data_dir")
        assert info.value.field == "run.benchmark.data_dir"
        assert "absolute path" in info.value.message


def test_a_symlink_inside_a_root_pointing_out_is_refused(tree: dict[str, Path]) -> None:
    (tree["shared"] / "escape").symlink_to(tree["secret"])
    (tree["shared"] / "etc").symlink_to("/etc")
    roots = _roots(tree)
    _denied(roots, str(tree["shared"] / "escape"))
    _denied(roots, str(tree["shared"] / "escape" / "key"))
    _denied(roots, str(tree["shared"] / "etc"))
    # A symlink that stays inside the roots is followed.
    (tree["shared"] / "inner").symlink_to(tree["shared"] / "bench")
    assert roots.resolve(str(tree["shared"] / "inner"), "bob", "f") == tree["shared"] / "bench"


def test_a_root_that_is_a_symlink_is_resolved(tree: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "data-link"
    link.symlink_to(tree["shared"])
    roots = DataRoots.build(default=(link,))
    assert roots.default == (tree["shared"],)
    # By the name the operator gave, and by the real one.
    assert roots.resolve(str(link / "bench"), "bob", "f") == tree["shared"] / "bench"
    assert roots.resolve(str(tree["shared"] / "bench"), "bob", "f") == tree["shared"] / "bench"
    _denied(roots, str(link / ".." / "secret"))


def test_the_state_directory_is_refused_even_under_a_root(tree: dict[str, Path], tmp_path: Path) -> None:
    # The whole tmp_path is a root: the state directory inside it is still fenced off.
    roots = DataRoots.build(default=(tmp_path, tree["state"] / "data"), fences=(tree["state"],))
    _denied(roots, str(tree["state"]))
    _denied(roots, str(tree["state"] / "sclated.db"))
    # Another tenant's runs.
    _denied(roots, str(tree["state"] / "runs" / "bob" / "run-1"), tenant="carol")
    _denied(roots, str(tree["state"] / "runs" / "bob"), tenant="bob")
    _denied(roots, f"{tree['state']}/data/../runs/bob")
    # Its data directory is a root of its own, inside the fence: allowed.
    assert roots.resolve(str(tree["state"] / "data"), "bob", "f") == tree["state"] / "data"


def test_a_symlink_into_the_state_directory_is_refused(tree: dict[str, Path]) -> None:
    (tree["shared"] / "runs").symlink_to(tree["state"] / "runs")
    roots = _roots(tree)
    _denied(roots, str(tree["shared"] / "runs" / "bob"))


def test_a_tenant_with_roots_of_its_own(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    inside = tree["alice"] / "mine"
    assert roots.resolve(str(inside), "alice", "f") == inside
    # Its roots replace the default ones for it ...
    _denied(roots, str(tree["shared"] / "bench"), tenant="alice")
    # ... and nobody else reads inside them, although they lie inside the shared root.
    _denied(roots, str(inside), tenant="bob")
    _denied(roots, str(tree["alice"]), tenant="bob")
    (tree["shared"] / "to-alice").symlink_to(tree["alice"])
    _denied(roots, str(tree["shared"] / "to-alice"), tenant="bob")
    assert roots.roots_for("alice") == (tree["alice"],)
    assert roots.roots_for("bob") == (tree["shared"], tree["state"] / "data")


def test_builtin_data_is_every_tenants(tree: dict[str, Path], tmp_path: Path) -> None:
    builtin = tmp_path / "builtin"
    builtin.mkdir()
    roots = DataRoots.build(default=(tree["shared"],), tenants={"alice": (tree["alice"],)}, builtin=(builtin,))
    for tenant in ("alice", "bob"):
        assert roots.resolve(str(builtin / "tiny"), tenant, "f") == builtin / "tiny"


def test_the_message_says_nothing_about_the_path(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    outside = [
        "/etc",
        "/etc/passwd",
        "/nonexistent-xyz",
        str(tree["secret"]),
        str(tree["secret"] / "key"),
        str(tree["state"] / "runs" / "bob"),
    ]
    messages = {_denied(roots, p) for p in outside}
    assert len(messages) == 1, messages
    message = messages.pop()
    for p in outside:
        assert p not in message
    assert "hunter2" not in message and "exist" not in message
    assert message.startswith("run.benchmark.data_dir is outside the data roots")
    other = _denied(roots, "/etc", field="run.benchmark.options.scripts_dir")
    assert other.replace("run.benchmark.options.scripts_dir", "run.benchmark.data_dir") == message


def test_a_path_written_outside_every_root_is_not_looked_at(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = _roots(tree)

    def no_disk(path: Any) -> str:
        raise AssertionError(f"looked at {path}")

    monkeypatch.setattr(os.path, "realpath", no_disk)
    _denied(roots, "/etc/shadow")
    _denied(roots, "/nonexistent-xyz/a/b")


# -- a run's spec: its data dir and every declared path option ---------------------------

REGISTRY = default_registry()
BENCHMARK_PATH_OPTIONS = sorted(
    (name, key)
    for name, bench in REGISTRY.benchmarks.items()
    for key in bench.info.path_options | bench.info.data_file_options
)


def _spec(benchmark: str, data_dir: str = "", **options: Any) -> RunSpec:
    return RunSpec.from_dict(
        {
            "benchmark": {"name": benchmark, "data_dir": data_dir, "options": options},
            "agent": {"harness": "scripted"},
        }
    )


def _confine(roots: DataRoots, spec: RunSpec, tenant: str = "bob") -> None:
    info = REGISTRY.benchmark(spec.benchmark.name).info
    roots.confine(tenant, spec, info, REGISTRY.agent(spec.agent.harness).path_options)


def test_the_benchmarks_declare_their_path_options() -> None:
    declared = {
        name: (set(b.info.path_options), set(b.info.data_file_options)) for name, b in REGISTRY.benchmarks.items()
    }
    assert declared["metaclaw"] == ({"scripts_dir", "seed_dir"}, set())
    assert declared["swebench"] == declared["swegym"] == ({"images"}, {"file"})
    assert declared["personamem"] == (set(), {"questions_file", "contexts_file"})
    assert declared["longmemeval"] == (set(), {"file"})
    assert declared["gaia2"] == declared["synthetic"] == (set(), set())
    for name, b in REGISTRY.benchmarks.items():
        for folder in b.info.builtin_data:
            assert folder.is_dir(), (name, folder)
    assert all(not entry.path_options for entry in REGISTRY.agents.values())


@pytest.mark.parametrize(("benchmark", "option"), BENCHMARK_PATH_OPTIONS)
def test_every_declared_option_is_confined(benchmark: str, option: str, tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    field = f"run.benchmark.options.{option}"
    data = str(tree["shared"] / "bench")
    for outside in ("/etc", str(tree["secret"] / "key"), str(tree["state"] / "runs" / "bob")):
        with pytest.raises(PermissionDenied) as info:
            _confine(roots, _spec(benchmark, data, **{option: outside}))
        assert info.value.field == field, info.value.message
    # A path inside the roots passes (what is there is the adapter's business).
    _confine(roots, _spec(benchmark, data, **{option: str(tree["shared"] / "bench" / "x")}))


@pytest.mark.parametrize(
    ("benchmark", "option"),
    [(n, k) for n, b in REGISTRY.benchmarks.items() for k in sorted(b.info.data_file_options)],
)
def test_a_data_file_option_stays_inside_the_data_dir(benchmark: str, option: str, tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    data = tree["shared"] / "bench"
    _confine(roots, _spec(benchmark, str(data), **{option: "rows.json"}))
    _confine(roots, _spec(benchmark, "", **{option: "sub/rows.json"}))  # in the built-in scenario's folder
    for name in ("../../secret/key", "a/../../b"):
        with pytest.raises(InvalidArgument) as info:
            _confine(roots, _spec(benchmark, str(data), **{option: name}))
        assert info.value.field == f"run.benchmark.options.{option}"
    (data / "rows.json").symlink_to(tree["secret"] / "key")
    with pytest.raises(PermissionDenied) as denied:
        _confine(roots, _spec(benchmark, str(data), **{option: "rows.json"}))
    assert denied.value.field == f"run.benchmark.options.{option}"


def test_the_data_dir_is_checked_first_and_by_its_field(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    with pytest.raises(PermissionDenied) as info:
        _confine(roots, _spec("metaclaw", "/etc", scripts_dir="/etc"))
    assert info.value.field == "run.benchmark.data_dir"
    with pytest.raises(PermissionDenied) as info:
        _confine(roots, _spec("synthetic", str(tree["state"])))
    assert info.value.field == "run.benchmark.data_dir"


def test_a_path_option_must_be_a_string(tree: dict[str, Path]) -> None:
    with pytest.raises(InvalidArgument) as info:
        _confine(_roots(tree), _spec("metaclaw", "", scripts_dir=5))
    assert info.value.field == "run.benchmark.options.scripts_dir"


def test_a_harness_path_option_is_confined(tree: dict[str, Path]) -> None:
    roots = _roots(tree)
    spec = RunSpec.from_dict(
        {"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted", "options": {"config": "/etc"}}}
    )
    info = BenchmarkInfo("synthetic", "", "")
    roots.confine("bob", spec, info, frozenset())  # not declared: not a path
    with pytest.raises(PermissionDenied) as denied:
        roots.confine("bob", spec, info, frozenset({"config"}))
    assert denied.value.field == "run.agent.options.config"


def test_describe_lists_the_roots_in_effect(tree: dict[str, Path]) -> None:
    described = _roots(tree).describe()
    assert described["default"] == [str(tree["shared"]), str(tree["state"] / "data")]
    assert described["tenants"] == {"alice": [str(tree["alice"])]}
    assert described["never"] == [str(tree["state"])]
    assert os.fspath(tree["secret"]) not in str(described)
