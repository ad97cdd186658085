"""Log-probs and entropy of response tokens: pure tensor functions shared by scoring
(no grad) and the trainer (with grad).

Batch layout (verl's): each row is [left-padded prompt | right-padded response], the
prompt part `P` columns wide and the response part `T` columns wide, so the response
tokens of every row sit in the last `T` columns and come out as (B, T) tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

from pipeline.errors import InputError


@dataclass
class PromptResponseBatch:
    input_ids: torch.Tensor  # (B, P + T) long
    attention_mask: torch.Tensor  # (B, P + T) long, 0 on padding
    position_ids: torch.Tensor  # (B, P + T) long
    response_mask: torch.Tensor  # (B, T) long, 1 on real response tokens

    @property
    def response_length(self) -> int:
        return self.response_mask.shape[1]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting only real tokens (0 on left padding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def pack_prompt_response(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    device: str | torch.device = "cpu",
) -> PromptResponseBatch:
    """Left-pad the prompts and right-pad the responses into one batch."""
    if len(prompts) != len(responses):
        raise InputError(f"responses: expected one per prompt ({len(prompts)}), got {len(responses)}")
    if not prompts:
        raise InputError("prompts: expected at least one prompt, got none")
    width_p = max(len(p) for p in prompts)
    width_t = max(1, max(len(r) for r in responses))
    batch = len(prompts)
    input_ids = torch.full((batch, width_p + width_t), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width_p + width_t), dtype=torch.long)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        if len(prompt) == 0:
            raise InputError(f"prompts[{row}]: expected at least one token, got an empty prompt")
        input_ids[row, width_p - len(prompt) : width_p] = torch.as_tensor(list(prompt), dtype=torch.long)
        input_ids[row, width_p : width_p + len(response)] = torch.as_tensor(list(response), dtype=torch.long)
        attention_mask[row, width_p - len(prompt) : width_p + len(response)] = 1
    return PromptResponseBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids_from_mask(attention_mask).to(device),
        response_mask=attention_mask[:, width_p:].to(device),
    )


def response_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    position_ids: torch.Tensor | None = None,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T) of each response token and (optionally) the entropy of that
    distribution; both (B, response_length). Values on padding are meaningless: mask them.
    Gradients flow when called outside `torch.no_grad`."""
    if temperature <= 0:
        raise InputError(f"temperature: expected > 0 for scoring, got {temperature}")
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=response_length + 1,
    )
    logits = out.logits[:, -response_length - 1 : -1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    labels = input_ids[:, -response_length:]
    # verl's flash-attn kernel may overwrite the logits' gradient in place; entropy needs it intact
    logp = logprobs_from_logits(logits, labels, inplace_backward=not compute_entropy)
    entropy = entropy_from_logits(logits) if compute_entropy else None
    return logp, entropy


def response_kl(
    student: torch.nn.Module, teacher: torch.nn.Module, batch: PromptResponseBatch, temperature: float = 1.0
) -> torch.Tensor:
    """KL(student(.|h_t) || teacher(.|h_t)) over the full vocabulary at every response position,
    (B, response_length); both models teacher-forced on the same batch, no gradients.
    Values on padding are meaningless: mask them."""
    if temperature <= 0:
        raise InputError(f"temperature: expected > 0, got {temperature}")
    width = batch.response_length
    logps = []
    with torch.inference_mode():
        for model in (student, teacher):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=batch.position_ids, use_cache=False,
                           logits_to_keep=width + 1).logits[:, -width - 1 : -1, :].float()
            logps.append(torch.log_softmax(logits / temperature, dim=-1))
    student_logp, teacher_logp = logps
    return (student_logp.exp() * (student_logp - teacher_logp)).sum(-1)
