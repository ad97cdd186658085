"""One decoding step: pick the next token of every row and record its log-prob."""

from __future__ import annotations

import torch


def sample_next_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row of `logits` (B, V) and log_softmax(logits / T) of it.

    Row i's token is the inverse CDF (in vocabulary order) of `uniforms[i]`, a number in
    [0, 1); without `uniforms` they come from torch's global generator.

    temperature == 0 is greedy and records log-probs at T = 1. With top_p < 1 the token
    is drawn from the nucleus, but the recorded log-prob is still that of the full
    tempered distribution (what the trainer recomputes).
    """
    logits = logits.float()
    if temperature == 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # drop a token once the mass before it already reaches top_p (the top token always stays)
        outside = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    # inverse-CDF draw: one uniform number per row (torch.multinomial draws per vocabulary
    # entry and dominates a tiny model's step time on CPU); zero-mass tokens are never hit
    cdf = probs.cumsum(dim=-1)
    if uniforms is None:
        uniforms = torch.rand(probs.shape[0], device=probs.device)
    u = uniforms.to(cdf.dtype)[:, None] * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
