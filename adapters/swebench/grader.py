"""SWE-bench's own grading, run in its own environment (``.venv-swebench``).

One request per process: a JSON object on stdin, a JSON object on stdout.

* ``{"op": "specs", "instances": [...]}`` -> ``{"eval_scripts": {id: script}, "apply_cmds",
  "swebench"}``: each test spec's eval script as swebench 5.x makes it (it records the
  tests' exit code after the end marker) and the patch commands its harness tries, in order.
* ``{"op": "report", "instance": {...}, "patch": str, "log_path": str}`` ->
  ``{"report": {...}, "swebench"}``: ``get_eval_report`` on the test log, with the
  per-test status.

Errors: ``{"error": "..."}`` and exit code 2. The daemon's side is ``_grading.py``.
This file runs under the swebench environment's interpreter only, so it imports
nothing of sclate.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _specs(instances: list[dict[str, Any]]) -> dict[str, Any]:
    import swebench
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS
    from swebench.harness.utils import make_test_spec

    scripts = {}
    for instance in instances:
        spec = make_test_spec(instance)
        scripts[spec.instance_id] = spec.eval_script
    return {"eval_scripts": scripts, "apply_cmds": list(GIT_APPLY_CMDS), "swebench": swebench.__version__}


def _report(instance: dict[str, Any], patch: str, log_path: str) -> dict[str, Any]:
    import swebench
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(instance)
    prediction = {"instance_id": spec.instance_id, "model_name_or_path": "sclate", "model_patch": patch}
    report = get_eval_report(spec, prediction, log_path, include_tests_status=True)
    return {"report": report[spec.instance_id], "swebench": swebench.__version__}


def main() -> int:
    try:
        request = json.loads(sys.stdin.read())
        op = request.get("op")
        if op == "specs":
            out = _specs(request["instances"])
        elif op == "report":
            out = _report(request["instance"], request["patch"], request["log_path"])
        else:
            raise ValueError(f"unknown op {op!r}")
    except Exception as exc:  # one line back to the daemon, whatever broke
        json.dump({"error": f"{type(exc).__name__}: {exc}"}, sys.stdout)
        return 2
    json.dump(out, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
