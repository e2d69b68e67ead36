"""Each instance's environment: its image, found or built, and the agent's checkout.

Image for an instance, first that applies:

1. the run's map (``--benchmark-option images=FILE``, a JSON object
   ``{instance_id: image}``): that image, which must be on the engine;
2. an instance of the project's own repositories (``own/``): its image built here
   on ``sclate-swe-own`` (git clone of the repository's bundle at ``base_commit``,
   later history dropped), rebuilt when its recipe changed (an image label);
3. the row's ``image`` column, then upstream's names for the instance
   (``sweb.eval.x86_64.<id>``, ``swebench/sweb.eval.x86_64.<id with __ as _1776_>``,
   SWE-Gym's ``xingyaoww/sweb.eval.x86_64.<id with __ as _s_>``), the first that
   is on the engine. Nothing is pulled.

No image: the run fails before its first event, naming the instance, the names
tried and how to provide one. The agent's starting point is ``/testbed`` as the
image has it, copied to the host once per run (``<run>/swebench/<id>/testbed``)
and seeded into the agent's workspace at the instance's start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import TaskContainers
from adapters.swebench._grading import GraderProcess, git
from adapters.swebench._instances import SWEInstance
from adapters.swebench._scripts import SWE_GYM_TEST_COMMANDS, make_eval_script
from adapters.swebench.image import OWN_IMAGE, OWN_REPOS_DIR
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.runtime import image_ref

__all__ = ["OWN_OWNER", "Prepared", "SWEEnvironment", "candidate_images", "read_image_map"]

OWN_OWNER = "sclate"
"""The owner of the project's own repositories (``sclate/<name>``, bundles in ``own/repos``)."""
_RECIPE_LABEL = "sclate.swe.recipe"
_BUILDER_VERSION = "1"


def candidate_images(inst: SWEInstance) -> list[str]:
    iid = inst.instance_id.lower()
    names = [inst.image] if inst.image else []
    names += [
        f"sweb.eval.x86_64.{iid}:latest",
        f"swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_')}:latest",
        f"xingyaoww/sweb.eval.x86_64.{iid.replace('__', '_s_')}:latest",
    ]
    return list(dict.fromkeys(names))


def read_image_map(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(f"image map {path} does not exist", field="options.images") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"image map {path} is not valid JSON: {exc}", field="options.images") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise InvalidArgument(
            f"image map {path} must be a JSON object of instance id -> image name", field="options.images"
        )
    return dict(data)


def own_bundle(inst: SWEInstance) -> Path | None:
    owner, _, name = inst.repo.partition("/")
    bundle = OWN_REPOS_DIR / f"{name}.bundle"
    return bundle if owner == OWN_OWNER and bundle.is_file() else None


def _own_dockerfile(inst: SWEInstance) -> str:
    name = inst.repo_name
    base = inst.base_commit
    return (
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
        f"# {inst.instance_id}: {inst.repo} at {base}, nothing of its later history.\n"
        f"RUN git clone -q --no-checkout /opt/sclate-swe/repos/{name}.bundle /testbed \\\n"
        " && cd /testbed \\\n"
        f" && git checkout -q -B main {base} \\\n"
        " && git remote remove origin \\\n"
        " && for b in $(git for-each-ref --format='%(refname:short)' refs/heads); do "
        '[ "$b" = main ] || git branch -q -D "$b"; done \\\n'
        " && git tag -l | xargs -r git tag -d >/dev/null \\\n"
        " && git reflog expire --expire=now --all && git gc -q --prune=now \\\n"
        f' && test "$(git rev-parse HEAD)" = {base} \\\n'
        ' && test "$(git rev-list --all | wc -l)" = "$(git rev-list HEAD | wc -l)"\n'
        "WORKDIR /testbed\n"
        "# As if installed in develop mode (upstream's images pip install -e the repository):\n"
        "# plain `pytest` imports the package from the checkout.\n"
        "ENV PYTHONPATH=/testbed\n"
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    image: str
    checkout: Path
    """``/testbed`` as the image has it, on the host (what the agent starts from)."""
    head: str
    """The checkout's HEAD: the agent's change is its diff against this commit."""
    row: Mapping[str, Any]
    """The row handed to swebench: the instance's own, completed for rows without 5.x columns."""
    eval_script: str


class SWEEnvironment:
    """Implements :class:`adapters.TaskEnvironment` for one run's instances."""

    def __init__(
        self,
        instances: Sequence[SWEInstance],
        *,
        image_map: Mapping[str, str] | None = None,
        test_cmd: str | None = None,
        grader: GraderProcess | None = None,
    ) -> None:
        self.instances = tuple(instances)
        self._image_map = dict(image_map or {})
        self._test_cmd = test_cmd
        self.grader = grader or GraderProcess()
        self.containers: TaskContainers | None = None
        self.prepared: dict[str, Prepared] = {}
        self.apply_cmds: list[str] = []
        self.swebench_version = ""
        self.root: Path | None = None
        self._own_root: Path | None = None

    async def open(self, run_dir: Path | None, containers: TaskContainers) -> None:
        self.containers = containers
        if run_dir is not None:
            self.root = run_dir / "swebench"
        else:
            self._own_root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-swebench-"))
            self.root = self._own_root
        images = {i.instance_id: await self._image(i, containers) for i in self.instances}
        rows = [self._row(i, images[i.instance_id]) for i in self.instances]
        scripts, self.apply_cmds, self.swebench_version = await self.grader.specs(rows)
        for inst, row in zip(self.instances, rows, strict=True):
            checkout = await self._checkout(inst, images[inst.instance_id], containers)
            head = (await git(checkout, "rev-parse", "HEAD")).strip()
            self.prepared[inst.instance_id] = Prepared(
                images[inst.instance_id], checkout, head, row, scripts[inst.instance_id]
            )

    async def close(self) -> None:
        if self._own_root is not None:
            await asyncio.to_thread(shutil.rmtree, self._own_root, True)
            self._own_root = None

    def _row(self, inst: SWEInstance, image: str) -> dict[str, Any]:
        row = dict(inst.raw)
        row["image"] = image
        if not row.get("eval_script"):
            cmd = self._test_cmd or SWE_GYM_TEST_COMMANDS.get(inst.repo, "pytest -rA")
            row["eval_script"] = make_eval_script(inst, cmd)
        row.setdefault("log_parser", "parse_log_pytest_v2" if inst.repo == "pydantic/pydantic" else "parse_log_pytest")
        row.setdefault("eval_type", "pass_and_fail")
        return row

    async def _image(self, inst: SWEInstance, containers: TaskContainers) -> str:
        iid = inst.instance_id
        mapped = self._image_map.get(iid)
        if mapped is not None:
            if not await containers.image_exists(mapped):
                raise FailedPrecondition(
                    f"instance {iid}: the image map names {mapped}, which is not on this engine "
                    "(load it with `docker load`; images are never pulled)",
                    reason="SWE_IMAGE_MISSING",
                )
            return mapped
        bundle = await asyncio.to_thread(own_bundle, inst)
        if bundle is not None:
            return await self._own_image(inst, containers)
        tried = candidate_images(inst)
        for name in tried:
            if await containers.image_exists(name):
                return name
        raise FailedPrecondition(
            f"instance {iid} has no environment image on this engine (tried {', '.join(tried)}); "
            "upstream's prebuilt images cannot be pulled here: `docker load` one and tag it with one of "
            "those names, or give --benchmark-option images=FILE (a JSON object of instance id -> image)",
            reason="SWE_IMAGE_MISSING",
        )

    async def _own_image(self, inst: SWEInstance, containers: TaskContainers) -> str:
        name = f"sweb.eval.x86_64.{inst.instance_id.lower()}:latest"
        dockerfile = _own_dockerfile(inst)
        parent = await image_ref(OWN_IMAGE)
        recipe = hashlib.sha256(f"{_BUILDER_VERSION}\0{parent}\0{dockerfile}".encode()).hexdigest()[:16]
        if await containers.image_label(name, _RECIPE_LABEL) != recipe:
            labels = {_RECIPE_LABEL: recipe, "sclate.swe.instance": inst.instance_id}
            await containers.build_image(name, dockerfile, base_recipe=OWN_IMAGE, labels=labels)
        return name

    async def _checkout(self, inst: SWEInstance, image: str, containers: TaskContainers) -> Path:
        assert self.root is not None
        dest = self.root / inst.instance_id / "testbed"
        marker = dest.parent / "testbed.image"
        if await asyncio.to_thread(dest.is_dir):
            if await asyncio.to_thread(lambda: marker.is_file() and marker.read_text() == image):
                return dest
            await asyncio.to_thread(shutil.rmtree, dest)
        await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
        container = await containers.open(image, purpose="checkout")
        try:
            await container.copy_out("/testbed", dest)
        finally:
            await container.close()
        await asyncio.to_thread(marker.write_text, image)
        return dest
