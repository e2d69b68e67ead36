"""The addon package as the sandbox gets it: standard library and mitmproxy
only, every module in the image (and in its content hash), and the script
loading its modules from beside itself wherever it is installed."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import proxy_addons
from sclated.runtime import _images

PACKAGE = Path(proxy_addons.__file__).resolve().parent
MODULES = sorted(p.name for p in PACKAGE.glob("*.py"))


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("name", MODULES)
def test_modules_import_nothing_the_sandbox_lacks(name: str) -> None:
    allowed = set(sys.stdlib_module_names) | {"proxy_addons"}
    if name not in ("record.py", "__init__.py"):
        allowed.add("mitmproxy")  # the sandbox venv has only mitmproxy
    assert imports_of(PACKAGE / name) <= allowed


def test_the_schema_is_standard_library_only() -> None:
    assert imports_of(PACKAGE / "record.py") <= set(sys.stdlib_module_names)


def test_the_sandbox_image_ships_every_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (recipe,) = [r for r in _images.recipes() if r.name == "sclate-sandbox"]
    shipped = {hf.dest: hf.locate() for hf in recipe.host_files if hf.dest.startswith("proxy/")}
    assert shipped == {f"proxy/{n}": PACKAGE / n for n in MODULES}
    dockerfile = (_images.images_dir() / "sandbox" / "Dockerfile").read_text()
    assert "COPY proxy/ /opt/sclate/proxy/" in dockerfile

    # Every module is in the image's tag: changing any one makes a new image.
    copy = tmp_path / "proxy_addons"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(_images, "_capture_addon_dir", lambda: copy)
    before = _images.recipe_tag("sclate-sandbox")
    assert before == _images.recipe_tag("sclate-sandbox")
    for name in ("record.py", "_sse.py"):
        with open(copy / name, "a") as f:
            f.write("\n# changed\n")
        after = _images.recipe_tag("sclate-sandbox")
        assert after != before
        before = after


def test_the_script_loads_its_modules_from_beside_it(tmp_path: Path) -> None:
    """As in the image: the package's files in /opt/sclate/proxy/ (not named
    proxy_addons), loaded by mitmproxy's own script loader, by path."""
    installed = tmp_path / "opt" / "sclate" / "proxy"
    installed.mkdir(parents=True)
    for name in MODULES:
        shutil.copy(PACKAGE / name, installed / name)
    probe = f"""
import json, sys
from mitmproxy.addons.script import load_script
m = load_script({str(installed / "capture.py")!r})
pkg = sys.modules["proxy_addons"]
print(json.dumps({{
    "addons": [type(a).__name__ for a in m.addons],
    "package": list(pkg.__path__),
    "modules": sorted(k for k, v in sys.modules.items() if k.startswith("proxy_addons.") and v is not None),
    "record": sys.modules["proxy_addons.record"].__file__,
}}))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["addons"] == ["SclateCapture"]
    assert seen["package"] == [str(installed)]
    assert seen["record"] == str(installed / "record.py")
    assert {f"proxy_addons.{n[:-3]}" for n in MODULES if n not in ("__init__.py", "capture.py")} <= set(seen["modules"])
