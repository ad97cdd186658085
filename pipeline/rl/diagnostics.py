"""Training diagnostics: what each step's advantages look like, and how far the Searcher is
from a reference Teacher on fixed dev contexts.

`advantage_diagnostics` reads one batch's tables after the advantages: per role, the share of
GRPO groups whose advantages are all exactly 0 (no signal) beside the share tied on the outcome
(samples.outcome: equal outcomes before the assignment bonus and the KL term; where the first
share is the smaller, bonuses or KL noise break ties), and the mean
|advantage| over the role's loss tokens, named by how the role is trained (grpo or opd);
the sampled Searcher KL to the Teacher (token mean of old - teacher over scored Searcher loss
tokens) and the batch's no-search share.

`searcher_contexts` fixes a set of Searcher (prompt, response) sequences once, from a rollout of
the reference Teacher on dev questions; `searcher_kl` measures the token-mean
KL(student || Teacher) over the full vocabulary at every generated position of those sequences,
so each Stage-II system is measured on the same contexts at every dev evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from pipeline.agents.trajectory import Rollout
from pipeline.policy.logprobs import pack_prompt_response, response_kl
from pipeline.rl.advantages import grpo_unit_advantage, grpo_units, tied_groups, unit_tie
from pipeline.systems import System


def advantage_diagnostics(samples: pd.DataFrame, tokens: pd.DataFrame, system: System,
                          tie_on: str = "reward") -> dict[str, float]:
    out: dict[str, float] = {}
    role_of = samples.set_index("sample_id")["role"]
    token_role = tokens["sample_id"].map(role_of).to_numpy()
    on_loss = tokens["loss_mask"].to_numpy() > 0
    advantage = np.abs(tokens["advantage"].to_numpy(dtype=np.float64))
    units = grpo_units(samples, system)
    unit_adv = grpo_unit_advantage(units.reward, units.group, unit_tie=unit_tie(units, tie_on)) \
        if len(units.reward) else np.zeros(0)
    tied = tied_groups(units.outcome, units.group)
    for role, policy in system.roles.items():
        on = on_loss & (token_role == role)
        if policy.kind != "none" and on.any():
            out[f"abs_adv_{role}_{policy.kind}"] = float(advantage[on].mean())
        if policy.kind == "grpo":
            mine = units.role == role
            if mine.any():
                zero = pd.Series(unit_adv[mine] == 0.0).groupby(units.group[mine]).all()
                out[f"zero_adv_groups_{role}"] = float(zero.mean())
                if not np.isnan(units.outcome[mine]).any():
                    out[f"tied_groups_{role}"] = float(pd.Series(tied[mine]).groupby(units.group[mine]).all().mean())
    searcher = on_loss & (token_role == "searcher") & tokens["teacher_logp"].notna().to_numpy()
    if searcher.any():
        out["searcher_kl_sampled"] = float((tokens["old_logp"].to_numpy()[searcher]
                                            - tokens["teacher_logp"].to_numpy()[searcher]).mean())
    searches = samples[samples["role"] == "searcher"].groupby("trajectory_id")["n_search"].sum()
    trajectories = samples["trajectory_id"].unique()
    out["no_search_share"] = float((searches.reindex(trajectories, fill_value=0) == 0).mean())
    return out


@dataclass(frozen=True)
class Contexts:
    """Token sequences to measure a divergence on: prompt ids, response ids, and which response
    positions the model generated (1) rather than the environment wrote (0)."""

    prompts: list[list[int]]
    responses: list[list[int]]
    generated: list[list[int]]

    def __len__(self) -> int:
        return len(self.prompts)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"prompt_ids": self.prompts, "response_ids": self.responses,
                             "generated": self.generated})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Contexts:
        def lists(column: str) -> list[list[int]]:
            return [[int(t) for t in row] for row in frame[column]]

        return cls(lists("prompt_ids"), lists("response_ids"), lists("generated"))


def searcher_contexts(rollout: Rollout) -> Contexts:
    """Every Searcher call of a rollout that generated at least one token."""
    prompts, responses, generated = [], [], []
    for call in rollout.calls:
        if call.role != "searcher" or not call.segments:
            continue
        prompts.append(list(call.prompt_ids))
        responses.append(call.response_ids)
        generated.append([int(s.source == "generated") for s in call.segments for _ in s.token_ids])
    return Contexts(prompts, responses, generated)


def searcher_kl(student: torch.nn.Module, teacher: torch.nn.Module, contexts: Contexts, pad_id: int,
                device: torch.device | str = "cpu", max_batch_tokens: int = 32768) -> float:
    """Token mean over the generated positions of `contexts` of KL(student || teacher)."""
    if not len(contexts):
        return float("nan")
    order = sorted(range(len(contexts)), key=lambda i: len(contexts.prompts[i]) + len(contexts.responses[i]))
    total, count, start = 0.0, 0, 0
    was_training = student.training
    student.eval()
    try:
        while start < len(order):
            end = start + 1
            width = len(contexts.prompts[order[start]]) + len(contexts.responses[order[start]])
            while end < len(order):
                width = max(width, len(contexts.prompts[order[end]]) + len(contexts.responses[order[end]]))
                if (end - start + 1) * width > max_batch_tokens:
                    break
                end += 1
            part = order[start:end]
            batch = pack_prompt_response([contexts.prompts[i] for i in part], [contexts.responses[i] for i in part],
                                         pad_id, device)
            kl = response_kl(student, teacher, batch)
            mask = torch.zeros_like(kl, dtype=torch.bool)
            for row, i in enumerate(part):
                mask[row, : len(contexts.generated[i])] = torch.tensor(contexts.generated[i], dtype=torch.bool)
            total += float(kl[mask].sum())
            count += int(mask.sum())
            start = end
    finally:
        student.train(was_training)
    return total / count if count else float("nan")
