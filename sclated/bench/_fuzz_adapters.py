"""`sclated bench fuzz`, the adapters part: corrupted benchmark data files.

Each benchmark's data is copied into a temporary directory (the project's own
scenarios, and ``metaclaw-bench-small`` from the shared data folder when it is
there: read from there, never written), then one file at a time is corrupted
(truncated, emptied, deleted, made a directory, invalid JSON, another encoding,
NUL bytes, nested past the recursion limit, fields removed or given values of
the wrong type, huge values) and the run is validated as ``CreateRun`` does it:
:func:`sclated.runs.load_scenario` with the registry's benchmark, then the
scenario's ``requires`` (and ``rounds`` and ``start_ns``, what a run reads of it
first). The file is put back before the next case.

Expected: the load succeeds (the corruption left valid data), or it raises an
error of sclate's own (:class:`~sclated.errors.SclateError`) whose message
names the file, and, for a field given a bad value or removed, the field (in the
message or as the error's ``field``). Counted as ``internal_errors``: any other
exception (a traceback at CreateRun) and a sclate error without the file's name;
``errors_without_field`` counts those naming the file but not the field.

Gaia2's scenario files are checked on the daemon's host when a run is created
(``adapters/gaia2/_files.py``, no ARE needed); a corrupted file that passes is
then opened by ARE's world process as a run's start does (its own environment,
``.venv-are``; ``gaia2_world_cases`` counts them, 0 when that environment is not
built), where a refusal must name the file too.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adapters
from adapters.gaia2._world import WorldProcess, are_python
from sclated.bench._fuzz_part import Tally as _Tally
from sclated.bench._fuzz_part import main
from sclated.errors import SclateError
from sclated.runs import AgentRef, BenchmarkRef, Registry, RunSpec, default_registry, load_scenario

__all__ = ["DATASETS", "Dataset", "run"]

ADAPTERS = Path(adapters.__file__).resolve().parent
SHARED_DATA = ADAPTERS.parents[1] / "shared" / "data"
"""Upstream-shaped data beside the checkout (read, never written)."""
HARNESS = "reference"
PATHS_PER_FILE = 10
"""Fields of each file given bad values (a seed-driven sample of its fields)."""


@dataclass(frozen=True)
class Dataset:
    name: str
    benchmark: str
    source: Path
    """A folder, copied whole."""
    files: tuple[str, ...]
    """The files to corrupt, relative to the folder."""
    scenario: str = ""
    subset: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    keyed_by_id: tuple[str, ...] = ()
    """Files whose objects' keys are ids (data), not field names: PersonaMem's contexts."""


def _metaclaw(name: str, root: Path) -> Dataset:
    files = ["all_tests.json"]
    files += sorted(str(p.relative_to(root)) for p in (root / "eval").glob("day*/questions.json"))[:3]
    files += sorted(str(p.relative_to(root)) for p in (root / "openclaw_state").rglob("*.jsonl"))[:2]
    return Dataset(name, "metaclaw", root, tuple(files))


def _datasets() -> list[Dataset]:
    out = [
        _metaclaw("metaclaw-tiny", ADAPTERS / "metaclaw" / "scenarios" / "tiny"),
        Dataset(
            "longmemeval-tiny",
            "longmemeval",
            ADAPTERS / "longmemeval" / "scenarios",
            ("tiny.json",),
            subset=("lme_tiny_ku_2",),
            options={"file": "tiny.json"},
        ),
        Dataset(
            "personamem-tiny",
            "personamem",
            ADAPTERS / "personamem" / "scenarios",
            ("questions_tiny.csv", "shared_contexts_tiny.jsonl"),
            options={
                "questions_file": "questions_tiny.csv",
                "contexts_file": "shared_contexts_tiny.jsonl",
                "context": "85678287ee",
            },
            keyed_by_id=("shared_contexts_tiny.jsonl",),
        ),
        Dataset(
            "swebench-own",
            "swebench",
            ADAPTERS / "swebench" / "own",
            ("instances.jsonl",),
            options={"file": "instances.jsonl", "repo": "sclate/ledger"},
        ),
        Dataset(
            "swegym-own",
            "swegym",
            ADAPTERS / "swebench" / "own",
            ("instances.jsonl",),
            options={"file": "instances.jsonl", "repo": "sclate/ledger"},
        ),
        Dataset(
            "gaia2-own",
            "gaia2",
            ADAPTERS / "gaia2" / "scenarios",
            ("sclate_calendar_chain.json",),
            scenario="sclate_calendar_chain",
        ),
    ]
    small = SHARED_DATA / "metaclaw-bench-small"
    if (small / "all_tests.json").is_file():
        out.append(_metaclaw("metaclaw-bench-small", small))
    return out


DATASETS = _datasets()


# -- corruptions -----------------------------------------------------------------------------

Mutation = Callable[[Path], None]


@dataclass(frozen=True)
class Corruption:
    name: str
    mutate: Mutation
    field: str | None = None
    """The field given a bad value or removed (its error must name it)."""


def _bytes(fn: Callable[[bytes], bytes]) -> Mutation:
    def mutate(p: Path) -> None:
        p.write_bytes(fn(p.read_bytes()))

    return mutate


def _cut(at: int) -> Mutation:
    return _bytes(lambda b: b[:at])


def _replace_with_dir(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _byte_corruptions(data: bytes, rng: random.Random) -> list[Corruption]:
    n = len(data)
    cuts = sorted({rng.randrange(1, max(2, n)) for _ in range(3)})
    at = rng.randrange(0, max(1, n))
    out = [
        Corruption("empty", _bytes(lambda b: b"")),
        Corruption("deleted", lambda p: p.unlink()),
        Corruption("a directory", _replace_with_dir),
        Corruption("not UTF-8 (bytes 0xff 0xfe inserted)", _bytes(lambda b: b[:at] + b"\xff\xfe" + b[at:])),
        Corruption("UTF-16", _bytes(lambda b: b.decode("utf-8", "replace").encode("utf-16"))),
        Corruption("latin-1 (a non-ASCII character re-encoded)", _bytes(lambda b: b + "é".encode("latin-1"))),
        Corruption("NUL bytes", _bytes(lambda b: b[:at] + b"\x00" * 8 + b[at:])),
        Corruption("binary garbage", _bytes(lambda b: bytes(rng.randrange(256) for _ in range(512)))),
        Corruption("nested past the recursion limit", _bytes(lambda b: b"[" * 100_000 + b"]" * 100_000)),
        Corruption("an integer of 5000 digits", _bytes(lambda b: b"9" * 5000)),
    ]
    out += [Corruption(f"truncated at {c} of {n} bytes", _cut(c)) for c in cuts]
    return out


BAD_VALUES: tuple[tuple[str, Any], ...] = (
    ("null", None),
    ("a number", 7),
    ("a negative number", -1),
    ("a float", 1.5),
    ("true", True),
    ("a string", "x"),
    ("an empty string", ""),
    ("a list", [1, "a"]),
    ("an object", {"k": "v"}),
    ("a string of 1 MB", "x" * (1 << 20)),
    ("nested 100000 deep", "NESTED"),
    ("an integer of 5000 digits", "BIGINT"),
)


def _walk(obj: Any, path: tuple[Any, ...] = (), depth: int = 6) -> Iterator[tuple[Any, ...]]:
    """Every path to a value under ``obj`` (dict keys and list indexes), a few per list."""
    if depth == 0:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, k)
            yield from _walk(v, (*path, k), depth - 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            yield (*path, i)
            yield from _walk(v, (*path, i), depth - 1)


def _field_name(path: tuple[Any, ...], keyed_by_id: bool) -> str | None:
    """The name of the field ``path`` leads to, or into (None: a value with no name)."""
    keys = [p for p in path[1 if keyed_by_id else 0 :] if isinstance(p, str)]
    return keys[-1] if keys else None


def _dump(obj: Any) -> str:
    """JSON text of ``obj``, where the placeholders NESTED and BIGINT become what JSON cannot build."""
    text = json.dumps(obj, ensure_ascii=False)
    return text.replace('"NESTED"', "[" * 100_000 + "]" * 100_000).replace('"BIGINT"', "9" * 5000)


def _set(obj: Any, path: tuple[Any, ...], value: Any, remove: bool) -> None:
    parent = obj
    for p in path[:-1]:
        parent = parent[p]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _json_corruptions(text: str, rng: random.Random, lines: bool, keyed_by_id: bool) -> list[Corruption]:
    """Fields removed or given bad values, in a JSON file or a JSON-lines file."""
    docs = [json.loads(ln) for ln in text.splitlines() if ln.strip()] if lines else [json.loads(text)]
    paths = [(i, p) for i, d in enumerate(docs) for p in _walk(d)]
    out: list[Corruption] = []
    for i, path in rng.sample(paths, min(PATHS_PER_FILE, len(paths))):
        for label, value in [("removed", None), *rng.sample(BAD_VALUES, 3)]:
            remove = label == "removed"
            if remove and not isinstance(path[-1], str):
                continue

            def mutate(
                p: Path, i: int = i, path: tuple[Any, ...] = path, value: Any = value, remove: bool = remove
            ) -> None:
                copied = json.loads(json.dumps(docs))
                _set(copied[i], path, value, remove)
                body = "\n".join(_dump(d) for d in copied) + "\n" if lines else _dump(copied[0])
                p.write_text(body, encoding="utf-8")

            where = f"line {i + 1} " if lines else ""
            shown = ".".join(str(x) for x in path)
            # A value JSON reading refuses is a fault of the text, found before any field is read.
            syntax = isinstance(value, str) and value in ("NESTED", "BIGINT")
            name = None if syntax else _field_name(path, keyed_by_id)
            out.append(Corruption(f"{where}{shown} {label if remove else 'is ' + label}", mutate, name))
    return out


def _csv_corruptions(text: str, rng: random.Random) -> list[Corruption]:
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    out: list[Corruption] = []

    def writer(new_rows: list[list[str]]) -> Mutation:
        def mutate(p: Path) -> None:
            buf = io.StringIO()
            csv.writer(buf).writerows(new_rows)
            p.write_text(buf.getvalue(), encoding="utf-8")

        return mutate

    for col in rng.sample(range(len(header)), min(PATHS_PER_FILE, len(header))):
        name = header[col]
        out.append(
            Corruption(f"column {name} removed", writer([[c for j, c in enumerate(r) if j != col] for r in rows]), name)
        )
        for label, value in (("empty", ""), ("text", "not a value"), ("200 KB", "x" * 200_000), ("a list", "[1, 2]")):
            changed = [list(r) for r in rows]
            changed[1 + rng.randrange(len(body))][col] = value
            # A cell past the CSV reader's field limit fails the row before it has columns.
            out.append(Corruption(f"a row's {name} is {label}", writer(changed), None if label == "200 KB" else name))
    extra = [list(r) for r in rows]
    extra[1] = [*extra[1], "one cell too many"]
    out.append(Corruption("a row with a cell more than the header", writer(extra)))
    out.append(Corruption("header only", writer(rows[:1])))
    return out


def corruptions(path: Path, rng: random.Random, keyed_by_id: bool = False) -> list[Corruption]:
    data = path.read_bytes()
    out = _byte_corruptions(data, rng)
    text = data.decode("utf-8")
    if path.suffix == ".csv":
        out += _csv_corruptions(text, rng)
    elif path.suffix in (".json", ".jsonl"):
        out += _json_corruptions(text, rng, lines=path.suffix == ".jsonl", keyed_by_id=keyed_by_id)
    return out


# -- validating as CreateRun does -------------------------------------------------------------


def validate(registry: Registry, ds: Dataset, data_dir: Path) -> None:
    """What CreateRun does with a run's benchmark data (``RunManager._validate``), then
    what a run reads of its scenario first."""
    spec = RunSpec(
        benchmark=BenchmarkRef(
            ds.benchmark, scenario=ds.scenario, data_dir=str(data_dir), subset=ds.subset, options=dict(ds.options)
        ),
        agent=AgentRef(HARNESS),
    )
    scenario = load_scenario(registry, spec)
    _ = scenario.requires
    _ = list(scenario.rounds)
    _ = scenario.start_ns


@dataclass
class Tally(_Tally):
    accepted: int = 0
    refused: int = 0
    by_dataset: dict[str, int] = field(default_factory=dict)


def judge(exc: BaseException | None, file: Path, corruption: Corruption) -> tuple[str, str] | None:
    """(count, why) when the outcome of a case is wrong; None when it is right."""
    if exc is None:
        return None
    if not isinstance(exc, SclateError):
        return "internal_errors", f"{type(exc).__name__}: {str(exc)[:160]}"
    if file.name not in exc.message:
        return "internal_errors", f"{type(exc).__name__} without the file's name: {exc.message[:200]}"
    name = corruption.field
    if name is not None and name not in exc.message and name not in (exc.field or ""):
        return "errors_without_field", f"no field {name!r} in: {exc.message[:200]}"
    return None


class _World:
    """ARE's world process, opening Gaia2 files as a run's start does (one process for all)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.process: WorldProcess | None = None
        self.cases = 0

    @staticmethod
    def available() -> bool:
        try:
            are_python()
        except SclateError:
            return False
        return True

    async def open(self, path: Path) -> None:
        self.cases += 1
        if self.process is None:
            self.process = WorldProcess(cwd=self.cwd)
            await self.process.start()
        try:
            await self.process.request("open", source={"file": str(path.resolve())}, oracle=True)
        except SclateError:
            if self.process is not None and self.process.stderr_tail() and "exited" in self.process.stderr_tail()[-1]:
                await self.close()
            raise

    async def close(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            await process.close()


async def run(args: argparse.Namespace, seed: int, *, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Every corruption of every dataset's files (``only``: of the datasets named),
    validated as CreateRun does."""
    rng = random.Random(seed)
    tally = Tally()
    registry = default_registry()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sclate-fuzz-adapters-") as tmp:
        world = _World(Path(tmp) / "are")
        try:
            datasets = [ds for ds in DATASETS if only is None or ds.name in only]
            await _fuzz(datasets, registry, Path(tmp), rng, tally, world if _World.available() else None)
        finally:
            await world.close()
    return {
        **tally.result(),
        "errors_without_field": tally.counts["errors_without_field"],
        "accepted": tally.accepted,
        "refused": tally.refused,
        "datasets": tally.by_dataset,
        "gaia2_world_cases": world.cases,
        "seconds": round(time.monotonic() - started, 1),
    }


async def _fuzz(
    datasets: Sequence[Dataset], registry: Registry, tmp: Path, rng: random.Random, tally: Tally, world: _World | None
) -> None:
    for ds in datasets:
        root = tmp / ds.name
        await asyncio.to_thread(shutil.copytree, ds.source, root)
        try:
            await asyncio.to_thread(validate, registry, ds, root)
        except Exception as exc:  # the data as shipped must load: else every case below means nothing
            tally.find("crashes", f"{ds.name}: the data as it is does not load: {type(exc).__name__}: {exc}")
            continue
        for rel in ds.files:
            target = root / rel
            original = await asyncio.to_thread(target.read_bytes)
            for corruption in corruptions(target, rng, rel in ds.keyed_by_id):
                tally.cases += 1
                tally.by_dataset[ds.name] = tally.by_dataset.get(ds.name, 0) + 1
                corruption.mutate(target)
                try:
                    error = await _outcome(registry, ds, root, target, world)
                finally:
                    if target.is_dir():
                        target.rmdir()
                    target.write_bytes(original)
                if error is None:
                    tally.accepted += 1
                else:
                    tally.refused += 1
                wrong = judge(error, target, corruption)
                if wrong is not None:
                    kind, why = wrong
                    tally.find(kind, f"{ds.name} {rel}, {corruption.name}: {why}")


async def _outcome(registry: Registry, ds: Dataset, root: Path, target: Path, world: _World | None) -> Exception | None:
    """What validating the corrupted data raised (None: it loaded), ARE's world included for Gaia2."""
    try:
        await asyncio.to_thread(validate, registry, ds, root)
        if world is not None and ds.benchmark == "gaia2":
            await world.open(target)
    except Exception as exc:
        return exc
    return None


if __name__ == "__main__":
    raise SystemExit(main("python -m sclated.bench._fuzz_adapters", run))
