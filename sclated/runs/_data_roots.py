"""Which host paths a tenant's runs may read: the daemon's data roots.

A run names host paths (``run.benchmark.data_dir``, and the options its
benchmark or harness declares as paths). The daemon reads them and copies from
them into sandboxes, so each one is confined, before anything touches it, to
the roots the operator gave the run's tenant:

- the tenant's own roots (``tenant_data_roots``) if it has any, else the
  daemon's (``data_roots``; by default ``<state_dir>/data``), and always the
  adapters' own scenario folders;
- resolved with symlinks, the roots too (a root may itself be a symlink);
- minus the *fences*: the daemon's state directory (every tenant's runs), its
  tokens and TLS files, and every other tenant's own roots. A fence inside the
  root that holds a path wins; a root inside a fence wins over it, which is how
  ``<state_dir>/data`` is a root while the rest of the state directory is not.

A path must be absolute and written inside a root (under the name the
operator gave it or its resolved one): one written elsewhere is refused before
anything looks at the disk, and one written inside is then resolved with
symlinks (``os.path.realpath``, as the kernel will follow them) and must still
be inside. A path that is not allowed gets one message naming the field, the
same whether it exists or not: nothing is read or echoed for it.

Files the operator put inside a root are trusted as they are: a symlink deep
in a data directory that points elsewhere is followed when the adapter reads
the file (what is checked is the path the run names, and the files options
name inside ``data_dir``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from adapters import BenchmarkInfo
from sclated.errors import InvalidArgument, PermissionDenied
from sclated.runs._spec import RunSpec

__all__ = ["DataRoots"]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _inside(path: PurePath, root: PurePath) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True, slots=True)
class DataRoots:
    """The confinement policy (see the module's docstring). Build it with :meth:`build`."""

    default: tuple[Path, ...] = ()
    """Roots of a tenant without roots of its own (resolved)."""
    tenants: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    """A tenant's own roots (resolved): they replace ``default`` for it, and fence it off from the others."""
    builtin: tuple[Path, ...] = ()
    """The adapters' own scenario folders (resolved): every tenant's."""
    fences: tuple[Path, ...] = ()
    """Never handed out unless a root lies inside (resolved): the state directory, secrets."""
    _lexical: Mapping[str, tuple[PurePath, ...]] = field(default_factory=dict, repr=False)
    """Each tenant's roots as written and as resolved, normalised without touching the disk."""

    @classmethod
    def build(
        cls,
        *,
        default: Iterable[Path] = (),
        tenants: Mapping[str, Iterable[Path]] | None = None,
        builtin: Iterable[Path] = (),
        fences: Iterable[Path] = (),
    ) -> DataRoots:
        """Resolve every root and fence once (at start-up; they are the operator's)."""
        given_default = tuple(default)
        given_tenants = {t: tuple(roots) for t, roots in (tenants or {}).items()}
        given_builtin = tuple(builtin)

        def lexical(paths: Iterable[Path]) -> tuple[PurePath, ...]:
            out: list[PurePath] = []
            for p in paths:
                out += [PurePath(os.path.normpath(p)), PurePath(os.path.realpath(p))]
            return tuple(dict.fromkeys(out))

        return cls(
            default=tuple(dict.fromkeys(_real(p) for p in given_default)),
            tenants={t: tuple(dict.fromkeys(_real(p) for p in roots)) for t, roots in given_tenants.items()},
            builtin=tuple(dict.fromkeys(_real(p) for p in given_builtin)),
            fences=tuple(dict.fromkeys(_real(p) for p in fences)),
            _lexical={
                "": lexical((*given_default, *given_builtin)),
                **{t: lexical((*roots, *given_builtin)) for t, roots in given_tenants.items()},
            },
        )

    def roots_for(self, tenant: str) -> tuple[Path, ...]:
        """The roots ``tenant`` reads from: its own (or the default ones), then the built-in data."""
        own = self.tenants.get(tenant, self.default)
        return tuple(dict.fromkeys((*own, *self.builtin)))

    def _fences_for(self, tenant: str, own: tuple[Path, ...]) -> list[Path]:
        others = [r for t, roots in self.tenants.items() if t != tenant for r in roots if r not in own]
        return [*self.fences, *others]

    def _denied(self, tenant: str, field_name: str) -> PermissionDenied:
        given = self.tenants.get(tenant, self.default)
        shown = ", ".join(str(r) for r in given) or "none"
        return PermissionDenied(
            f"{field_name} is outside the data roots this daemon gives tenant {tenant!r} ({shown}; and the "
            "benchmarks' built-in data); ask the operator to add a root (data_roots, tenant_data_roots)",
            field=field_name,
        )

    def resolve(self, path_text: str, tenant: str, field_name: str) -> Path:
        """``path_text`` resolved with symlinks, if ``tenant`` may read it; else
        PermissionDenied naming ``field_name`` (InvalidArgument for a relative path)."""
        if not isinstance(path_text, str):
            raise InvalidArgument(f"{field_name} must be a path (a string)", field=field_name)
        if "\x00" in path_text:
            raise InvalidArgument(f"{field_name} must not contain NUL characters", field=field_name)
        given = Path(path_text)
        if not given.is_absolute():
            raise InvalidArgument(
                f"{field_name} must be an absolute path on the daemon's host (inside its data roots)",
                field=field_name,
            )
        # First without touching the disk: a path that is not even written inside
        # a root is refused before anything (realpath's lstat calls) looks at it.
        lexical = PurePath(os.path.normpath(given))
        written = self._lexical.get(tenant if tenant in self.tenants else "", ())
        if not any(_inside(lexical, r) for r in written) and not self._symlinked_parent(given, written):
            raise self._denied(tenant, field_name)
        real = _real(given)
        own = self.roots_for(tenant)
        holding = [r for r in own if _inside(real, r)]
        if not holding:
            raise self._denied(tenant, field_name)
        deepest = max(holding, key=lambda r: len(r.parts))
        for fence in self._fences_for(tenant, own):
            if _inside(real, fence) and _inside(fence, deepest):
                raise self._denied(tenant, field_name)
        return real

    @staticmethod
    def _symlinked_parent(given: Path, written: tuple[PurePath, ...]) -> bool:
        """Whether ``given`` (lexically outside every root) may still be inside one
        once its ``..`` are taken after symlinks: only a path with ``..`` can be."""
        return ".." in given.parts and any(_inside(PurePath(given), r) for r in written)

    def confine(self, tenant: str, spec: RunSpec, benchmark: BenchmarkInfo, agent_path_options: frozenset[str]) -> None:
        """Check every host path ``spec`` names (its data dir, the options its benchmark
        and harness declare as paths); the first one not allowed raises."""
        b = spec.benchmark
        data_dir = self.resolve(b.data_dir, tenant, "run.benchmark.data_dir") if b.data_dir else None
        for key in sorted(benchmark.path_options & set(b.options)):
            self._option(b.options, key, tenant, "run.benchmark.options")
        for key in sorted(benchmark.data_file_options & set(b.options)):
            value = b.options[key]
            field_name = f"run.benchmark.options.{key}"
            if value is None:
                continue
            if not isinstance(value, str):
                raise InvalidArgument(f"{field_name} must be a file name (a string)", field=field_name)
            if Path(value).is_absolute():
                self.resolve(value, tenant, field_name)
                continue
            if ".." in Path(value).parts or "\x00" in value:
                raise InvalidArgument(
                    f"{field_name} must name a file inside run.benchmark.data_dir (no '..')", field=field_name
                )
            if data_dir is not None:
                # A symlink inside the data pointing out of the roots is refused too.
                self.resolve(str(data_dir / value), tenant, field_name)
        for key in sorted(agent_path_options & set(spec.agent.options)):
            self._option(spec.agent.options, key, tenant, "run.agent.options")

    def _option(self, options: Mapping[str, Any], key: str, tenant: str, prefix: str) -> None:
        value = options[key]
        if value is not None:
            self.resolve(value, tenant, f"{prefix}.{key}")

    def describe(self) -> dict[str, Any]:
        """The roots in effect, for ``sclated doctor``."""
        return {
            "default": [str(p) for p in self.default],
            "tenants": {t: [str(p) for p in roots] for t, roots in sorted(self.tenants.items())},
            "builtin": [str(p) for p in self.builtin],
            "never": [str(p) for p in self.fences],
        }
