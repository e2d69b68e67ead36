"""Check sclate's JSONL exports with the trainers' own code.

Run with the trainers' environment (``make venv`` builds ``.venv-trainers``)::

    .venv-trainers/bin/python tests/trainers/validate_exports.py skyrl export.jsonl
    .venv-trainers/bin/python tests/trainers/validate_exports.py verl export.jsonl

It imports nothing from sclate. Several files may follow the format; each gets
one JSON line on stdout (``ok``, and the figures, or the trainer's complaint in
``error``, also on stderr). Exit status 0 when the trainer accepts every file, 1
when it refuses one.

``skyrl`` (SkyRL, package ``skyrl``): the rows become one ``GeneratorOutput``
(SkyRL's TypedDict) with ``TrajectoryID`` ids, checked by SkyRL's own
``validate_generator_output`` twice, once with the scalar ``rewards`` and once
with the per-token ``token_rewards`` (SkyRL's ``List[List[float]]`` form); then
laid out as a training batch by SkyRL's ``convert_prompts_responses_to_batch_tensors``
and given GRPO advantages by its ``compute_grpo_outcome_advantage``, grouped by
``trajectory_id.instance_id`` as SkyRL's trainer does.

``verl``: each row becomes verl's agent-loop output (the pydantic
``AgentLoopOutput``), the batch is padded as verl's agent loop pads it (prompts
left, responses right, the reward at the last response token as ``rm_scores``)
into verl's ``DataProto`` (whose consistency checks run), and verl's
``compute_grpo_outcome_advantage`` groups it by ``uid``. verl's agent loops make
``response_ids`` from ``response_mask`` (their lengths equal by construction)
and nothing in verl checks that alignment for a row it is handed, so this
script asserts it itself, saying so.

SkyRL 0.4.0 declares Python >= 3.12 and the trainers' environment is 3.11 (the
CPU build of torch is at hand for 3.11 only): it is installed without its
dependencies, with those its validation path imports, and one 3.12 construct is
bridged before importing it: pydantic refuses ``typing.TypedDict`` in a model
on Python < 3.12 (``skyrl.tinker.types``), so ``typing.TypedDict`` is aliased to
``typing_extensions.TypedDict``, which pydantic accepts and which behaves the same.
"""

from __future__ import annotations

import json
import math
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import torch
import typing_extensions


class Rejected(Exception):
    """The trainer's code refused the export."""


def load(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise Rejected(f"{path}: no rows")
    return rows


def _groups(uids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in uids:
        out[u] = out.get(u, 0) + 1
    return out


def _check_advantages(adv: torch.Tensor, uids: list[str]) -> dict[str, Any]:
    if not torch.isfinite(adv).all():
        raise Rejected("GRPO advantages are not finite")
    sizes = _groups(uids)
    return {"groups": len(sizes), "largest_group": max(sizes.values()), "advantage_abs_max": float(adv.abs().max())}


# -- SkyRL ---------------------------------------------------------------------------------


def skyrl(rows: list[dict[str, Any]]) -> dict[str, Any]:
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]  # see the module docstring
    from skyrl.backends.skyrl_train.utils.ppo_utils import compute_grpo_outcome_advantage
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.base import GeneratorOutput, TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    def tid(raw: Any) -> TrajectoryID:
        if isinstance(raw, dict):
            return TrajectoryID(instance_id=str(raw["instance_id"]), repetition_id=int(raw["repetition_id"]))
        return TrajectoryID(instance_id=str(raw), repetition_id=0)

    logprobs = [r.get("rollout_logprobs") for r in rows]
    # SkyRL takes logprobs for every row or for none.
    rollout_logprobs = None if any(lp is None for lp in logprobs) else logprobs
    base: dict[str, Any] = {
        "prompt_token_ids": [r["prompt_token_ids"] for r in rows],
        "response_ids": [r["response_ids"] for r in rows],
        "loss_masks": [r["loss_masks"] for r in rows],
        "stop_reasons": [str(r.get("stop_reason") or "") for r in rows],
        "rollout_metrics": None,
        "rollout_logprobs": rollout_logprobs,
        "trajectory_ids": [tid(r["trajectory_id"]) for r in rows],
        "trajectory_generation_times": None,
        "trajectory_time_splits": None,
        "rollout_expert_indices": None,
        "rollout_sample_support": None,
        "is_last_step": None,
        "env_metrics": None,
        "pixel_values": None,
        "image_grid_thw": None,
    }
    for form, rewards in (("scalar", [r["rewards"] for r in rows]), ("per_token", [r["token_rewards"] for r in rows])):
        out: GeneratorOutput = {**base, "rewards": rewards}  # type: ignore[typeddict-item]
        try:
            validate_generator_output(len(rows), out)
        except (AssertionError, RuntimeError, TypeError, ValueError) as e:
            raise Rejected(f"SkyRL validate_generator_output ({form} rewards): {e}") from None
    try:
        _seq, _attn, response_mask, rewards_t, _loss, _lp, _r, _s = convert_prompts_responses_to_batch_tensors(
            0,
            base["prompt_token_ids"],
            base["response_ids"],
            [r["token_rewards"] for r in rows],
            base["loss_masks"],
            rollout_logprobs,
        )
    except (AssertionError, RuntimeError, ValueError) as e:
        raise Rejected(f"SkyRL convert_prompts_responses_to_batch_tensors: {e}") from None
    uids = [t.instance_id for t in base["trajectory_ids"]]
    adv, _ret = compute_grpo_outcome_advantage(rewards_t, response_mask, np.array(uids, dtype=object))
    return {"trainer": "skyrl", "rows": len(rows), **_check_advantages(adv, uids)}


# -- verl ----------------------------------------------------------------------------------


def verl(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from pydantic import ValidationError
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    outs: list[AgentLoopOutput] = []
    for i, r in enumerate(rows):
        try:
            out = AgentLoopOutput(
                prompt_ids=r["prompts"],
                response_ids=r["responses"],
                response_mask=r["response_mask"],
                response_logprobs=r.get("rollout_log_probs"),
                reward_score=r["reward"],
                num_turns=r["num_turns"],
                metrics=AgentLoopMetrics(),
                extra_fields={"turn_scores": r.get("turn_scores"), "uid": r["uid"]},
            )
        except ValidationError as e:
            raise Rejected(f"verl AgentLoopOutput, row {i}: {e}") from None
        # Our assertion of verl's invariant (its agent loops slice response_ids to the mask's length).
        n = len(out.response_ids)
        if len(out.response_mask) != n or (out.response_logprobs is not None and len(out.response_logprobs) != n):
            raise Rejected(f"verl row {i}: response_mask/rollout_log_probs not aligned with {n} response ids")
        outs.append(out)

    bsz = len(outs)
    plen = max(len(o.prompt_ids) for o in outs)
    rlen = max(len(o.response_ids) for o in outs)
    prompts = torch.zeros(bsz, plen, dtype=torch.long)
    prompt_attn = torch.zeros(bsz, plen, dtype=torch.long)
    responses = torch.zeros(bsz, rlen, dtype=torch.long)
    response_attn = torch.zeros(bsz, rlen, dtype=torch.long)
    response_mask = torch.zeros(bsz, rlen, dtype=torch.long)
    logprobs = torch.zeros(bsz, rlen, dtype=torch.float32)
    for i, o in enumerate(outs):
        p, n = len(o.prompt_ids), len(o.response_ids)
        prompts[i, plen - p :] = torch.tensor(o.prompt_ids)  # left padding, as verl's agent loop
        prompt_attn[i, plen - p :] = 1
        responses[i, :n] = torch.tensor(o.response_ids)  # right padding
        response_attn[i, :n] = 1
        response_mask[i, :n] = torch.tensor(o.response_mask)
        if o.response_logprobs is not None:
            logprobs[i, :n] = torch.tensor(o.response_logprobs)
    response_mask = response_mask * response_attn
    attention_mask = torch.cat([prompt_attn, response_attn], dim=1)
    input_ids = torch.cat([prompts, responses], dim=1)
    position_ids = torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0, max=None) * attention_mask
    # verl's _postprocess: each reward at its row's last response token.
    rm_scores = torch.zeros_like(response_mask, dtype=torch.float32)
    last = response_attn.sum(dim=1) - 1
    rm_scores[torch.arange(bsz), last] = torch.tensor([float(o.reward_score or 0.0) for o in outs])
    uids = [str(o.extra_fields["uid"]) for o in outs]
    tensors: dict[str, torch.Tensor] = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "rm_scores": rm_scores,
    }
    if all(o.response_logprobs is not None for o in outs):
        tensors["rollout_log_probs"] = logprobs
    try:
        batch = DataProto.from_dict(
            tensors=tensors,
            non_tensors={
                "uid": np.array(uids, dtype=object),
                "__num_turns__": np.array([o.num_turns for o in outs], dtype=np.int32),
            },
        )
    except (AssertionError, RuntimeError, ValueError) as e:
        raise Rejected(f"verl DataProto: {e}") from None
    if len(batch) != bsz:
        raise Rejected(f"verl DataProto holds {len(batch)} rows for {bsz}")
    adv, _ret = compute_grpo_outcome_advantage(
        token_level_rewards=batch.batch["rm_scores"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
    )
    figures = _check_advantages(adv, uids)
    if not math.isfinite(float(batch.batch["rm_scores"].sum())):
        raise Rejected("verl rm_scores are not finite")
    return {"trainer": "verl", "rows": bsz, **figures}


CHECKS = {"skyrl": skyrl, "verl": verl}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in CHECKS:
        print(f"usage: validate_exports.py {{{','.join(CHECKS)}}} FILE.jsonl [FILE.jsonl ...]", file=sys.stderr)
        return 2
    status = 0
    for name in argv[1:]:
        try:
            result = {"file": name, "ok": True, **CHECKS[argv[0]](load(Path(name)))}
        except Rejected as e:
            print(f"REJECTED {name}: {e}", file=sys.stderr)
            result, status = {"file": name, "ok": False, "error": str(e)}, 1
        print(json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
