"""SWE-bench Verified and SWE-Gym: a repository's issues as a continual-learning arc.

``SWEBenchmark("swebench")`` reads SWE-bench rows (Verified's 5.x columns included:
``eval_script``, ``log_parser``, ``eval_type``, ``image``) and
``SWEBenchmark("swegym")`` SWE-Gym's (the same fields without those), both
unchanged from a JSON list or JSON lines file in ``data_dir``. A run is one
repository's instances in ``created_at`` order as consecutive working days
(``_scenario.py``), each graded in its own environment image the way swebench
grades (``_grading.py``, with the ``swebench`` package in its own environment).
``scenario="own"`` is the project's own instances (``own/``, see its README).

Options: ``file`` (the data file's name in ``data_dir``), ``repo`` (``owner/name``,
when the data has several), ``images`` (a JSON file: instance id -> image),
``per_day`` (instances per working day, default 2), ``spacing_h`` (hours between
them, default 4), ``hints`` (give ``hints_text`` too, default false), ``test_cmd``
(for rows without an eval script), ``eval_timeout_s`` (default 1800).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters import BenchmarkInfo, ScenarioConfig
from adapters.swebench._environment import SWEEnvironment, candidate_images, read_image_map
from adapters.swebench._grading import GraderProcess, swebench_python
from adapters.swebench._instances import REQUIRED_FIELDS, SWEInstance, pick, read_instances
from adapters.swebench._scenario import SWEScenario, working_slots
from adapters.swebench._scripts import make_eval_script, patch_files
from adapters.swebench.image import register_images
from sclated.errors import InvalidArgument, NotFound

__all__ = [
    "OWN_INSTANCES",
    "REQUIRED_FIELDS",
    "GraderProcess",
    "SWEBenchmark",
    "SWEEnvironment",
    "SWEInstance",
    "SWEScenario",
    "candidate_images",
    "make_eval_script",
    "patch_files",
    "read_instances",
    "register_images",
    "swebench_python",
    "working_slots",
]

OWN_INSTANCES = Path(__file__).resolve().parent / "own" / "instances.jsonl"
_OPTIONS = frozenset({"file", "repo", "images", "per_day", "spacing_h", "hints", "test_cmd", "eval_timeout_s"})
_PATH_OPTIONS = frozenset({"images"})
"""A JSON file mapping instance ids to image names, anywhere in the tenant's data roots."""
_DATA_FILE_OPTIONS = frozenset({"file"})
_SWE_GYM_DROPPED = ("eval_script", "log_parser", "eval_type", "image", "environment_setup_commit", "difficulty")


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no"):
        return False
    raise InvalidArgument(f"option {name}={value!r} is not true or false", field=f"options.{name}")


def _number(value: Any, name: str, *, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"option {name}={value!r} is not a number", field=f"options.{name}") from None
    if not low <= number <= high:
        raise InvalidArgument(f"option {name}={value!r} must be in [{low:g}, {high:g}]", field=f"options.{name}")
    return number


class SWEBenchmark:
    """The SWE-bench and SWE-Gym adapter (implements :class:`adapters.BenchmarkAdapter`)."""

    def __init__(self, flavour: str = "swebench") -> None:
        if flavour not in ("swebench", "swegym"):
            raise InvalidArgument(f"SWE flavour must be swebench or swegym, not {flavour!r}")
        self.flavour = flavour

    @property
    def info(self) -> BenchmarkInfo:
        if self.flavour == "swebench":
            return BenchmarkInfo(
                name="swebench",
                description=(
                    "SWE-bench (Verified): one repository's issues, oldest first, as consecutive working days; "
                    "each graded by the swebench package in the instance's own environment image."
                ),
                data_format=(
                    "a JSON list or JSONL file of SWE-bench rows (instance_id, repo, base_commit, patch, "
                    "test_patch, problem_statement, FAIL_TO_PASS, PASS_TO_PASS, version, created_at, "
                    "environment_setup_commit; Verified's eval_script, log_parser, eval_type, image), and each "
                    "instance's environment image loaded on the engine (upstream's name, or --benchmark-option "
                    "images=FILE)"
                ),
                builtin_scenarios=("own",),
                path_options=_PATH_OPTIONS,
                data_file_options=_DATA_FILE_OPTIONS,
                builtin_data=(OWN_INSTANCES.parent,),
            )
        return BenchmarkInfo(
            name="swegym",
            description=(
                "SWE-Gym: one repository's issues, oldest first, as consecutive working days; eval scripts made "
                "as swebench 4.x made them, graded by the swebench package."
            ),
            data_format=(
                "a JSON list or JSONL file of SWE-Gym rows (instance_id, repo, base_commit, patch, test_patch, "
                "problem_statement, FAIL_TO_PASS, PASS_TO_PASS as lists, version, created_at), and each "
                "instance's environment image loaded on the engine (xingyaoww/sweb.eval.x86_64.<id>, or "
                "--benchmark-option images=FILE)"
            ),
            builtin_scenarios=("own",),
            path_options=_PATH_OPTIONS,
            data_file_options=_DATA_FILE_OPTIONS,
            builtin_data=(OWN_INSTANCES.parent,),
        )

    def _data_file(self, config: ScenarioConfig) -> Path:
        if config.data_dir is None:
            if config.scenario != "own":
                raise NotFound(f"no {self.flavour} scenario {config.scenario!r}: give data_dir or the built-in 'own'")
            return OWN_INSTANCES
        path = Path(config.data_dir)
        if path.is_file():
            return path
        name = config.options.get("file")
        if name is not None:
            return path / str(name)
        found = sorted(p for p in path.glob("*") if p.suffix in (".json", ".jsonl"))
        if len(found) != 1:
            raise InvalidArgument(
                f"{path} holds {len(found)} .json/.jsonl files ({', '.join(p.name for p in found[:5])}); "
                "name one with --benchmark-option file=NAME",
                field="options.file",
            )
        return found[0]

    def instances(self, config: ScenarioConfig) -> list[SWEInstance]:
        rows = read_instances(self._data_file(config))
        if self.flavour == "swegym" and config.data_dir is None:
            # The own instances in SWE-Gym's layout: no 5.x columns, test lists as lists.
            rows = [_as_swe_gym(i) for i in rows]
        return rows

    def load(self, config: ScenarioConfig) -> SWEScenario:
        unknown = sorted(set(config.options) - _OPTIONS)
        if unknown:
            raise InvalidArgument(
                f"unknown {self.flavour} option(s) {unknown}; known: {', '.join(sorted(_OPTIONS))}",
                field=f"options.{unknown[0]}",
            )
        opts = config.options
        repo = opts.get("repo")
        chosen = pick(self.instances(config), config.subset, None if repo is None else str(repo))
        image_map = read_image_map(Path(str(opts["images"]))) if "images" in opts else {}
        environment = SWEEnvironment(
            chosen, image_map=image_map, test_cmd=None if opts.get("test_cmd") is None else str(opts["test_cmd"])
        )
        return SWEScenario(
            self.flavour,
            chosen,
            environment,
            per_day=int(_number(opts.get("per_day", 2), "per_day", low=1, high=24)),
            spacing_h=_number(opts.get("spacing_h", 4), "spacing_h", low=0, high=12),
            hints=_bool(opts.get("hints", False), "hints"),
            eval_timeout_s=_number(opts.get("eval_timeout_s", 1800), "eval_timeout_s", low=1, high=6 * 3600),
        )


def _as_swe_gym(inst: SWEInstance) -> SWEInstance:
    from adapters.swebench._instances import parse_instance

    row = {k: v for k, v in inst.raw.items() if k not in _SWE_GYM_DROPPED}
    row["FAIL_TO_PASS"] = list(inst.fail_to_pass)
    row["PASS_TO_PASS"] = list(inst.pass_to_pass)
    return parse_instance(row, f"own instance {inst.instance_id} (as SWE-Gym)")
