"""Packed teacher forcing with gradients, for the PPO pass: no padding, shared prompts computed once.

Samples of one minibatch that have the same prompt (an Answerer's candidates) form one packed
segment [prompt | response 1 | response 2 | ...]: each response attends to the prompt and
causally to itself, at the positions it would have alone, so its log-probs are those of
[prompt | response] and the prompt's forward and backward pass run once. Logits are taken only
where a response token is predicted. Groups are cut into micro-batches of at most a token budget
(a group larger than the budget gets one of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from verl.utils.torch_functional import entropy_from_logits

from pipeline.engine.attention import Segment, Segments
from pipeline.engine.qwen3 import Qwen3Weights, forward_hidden, logits_of


@dataclass
class Group:
    prompt: list[int]
    members: list[int]  # indices into the caller's samples, in their order
    responses: list[list[int]]

    @property
    def tokens(self) -> int:
        return len(self.prompt) + sum(len(r) for r in self.responses)


def group_by_prompt(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> list[Group]:
    """Samples with equal prompts in one group each, groups in the order of their first sample."""
    groups: dict[tuple[int, ...], Group] = {}
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        key = tuple(prompt)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(list(prompt), [], [])
        group.members.append(i)
        group.responses.append(list(response))
    return list(groups.values())


def token_budget_parts(groups: Sequence[Group], budget: int) -> list[list[Group]]:
    """Consecutive groups, at most `budget` tokens per part (a larger group alone)."""
    parts: list[list[Group]] = []
    used = budget
    for group in groups:
        if parts and used + group.tokens <= budget:
            parts[-1].append(group)
            used += group.tokens
        else:
            parts.append([group])
            used = group.tokens
    return parts


def _branch_mask(prompt: int, lengths: list[int]) -> torch.Tensor:
    """(n, n) attention mask of [prompt | response 1 | ...]: causal in the prompt, each response
    sees the prompt and its own earlier tokens."""
    n = prompt + sum(lengths)
    branch = torch.zeros(n, dtype=torch.long)  # 0: prompt, b + 1: response b
    start = prompt
    for b, length in enumerate(lengths):
        branch[start:start + length] = b + 1
        start += length
    index = torch.arange(n)
    causal = index[None, :] <= index[:, None]
    visible = (branch[None, :] == 0) | (branch[None, :] == branch[:, None])
    return causal & visible


def packed_logprobs(weights: Qwen3Weights, groups: Sequence[Group], temperature: float = 1.0,
                    entropy_grad: bool = False, device: torch.device | str = "cpu"
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(logits / T) of every response token and the entropy of that distribution, both
    flat (N,) in group order, then member order, then token order. Gradients reach the model's
    parameters through the log-probs, and through the entropy only with `entropy_grad`."""
    ids, positions, segments, wanted, labels = [], [], [], [], []
    offset = 0
    for group in groups:
        p = len(group.prompt)
        ids.extend(group.prompt)
        positions.extend(range(p))
        lengths = [len(r) for r in group.responses]
        start = offset + p
        for response in group.responses:
            ids.extend(response)
            positions.extend(range(p, p + len(response)))
            # token t of a response is predicted at its previous token: the prompt's last for t = 0
            wanted.extend([offset + p - 1] + list(range(start, start + len(response) - 1)))
            labels.extend(response)
            start += len(response)
        mask = _branch_mask(p, lengths) if len(lengths) > 1 else None
        segments.append(Segment(p + sum(lengths), mask=None if mask is None else mask.to(device)))
        offset += p + sum(lengths)
    hidden = forward_hidden(weights, weights.trainable(), torch.tensor(ids, device=device),
                            torch.tensor(positions, device=device), Segments(weights.shape, segments))
    logits = logits_of(weights, hidden[torch.tensor(wanted, device=device)]).float()
    if temperature != 1.0:
        logits = logits / temperature
    # log p(label) = -cross entropy: one fused kernel and its backward (verl's CPU path loops over rows)
    logp = -F.cross_entropy(logits, torch.tensor(labels, device=device), reduction="none")
    if entropy_grad:
        return logp, entropy_from_logits(logits)
    with torch.no_grad():
        entropy = entropy_from_logits(logits.detach())
    return logp, entropy
