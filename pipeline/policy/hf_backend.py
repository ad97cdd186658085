"""PolicyBackend over a transformers model in this process (CPU for the tiny profile).

Generation is one batched sampling loop for all prompts x n samples: left padding,
attention mask and position ids, a KV cache, and rows dropped from the batch (and the
cache) as soon as they finish.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedTokenizerBase

from pipeline.errors import InputError
from pipeline.policy.base import Generation, SamplingParams, validate_sampling, validate_scoring
from pipeline.policy.batching import shared_prefix_groups
from pipeline.policy.encoding import TokenizerText, truncate_left
from pipeline.policy.kv_cache import PreallocatedLayer
from pipeline.policy.logprobs import pack_prompt_response, response_logprobs
from pipeline.policy.next_token import sample_next_tokens
from pipeline.policy.sampling_seeds import keyed_uniforms, sample_seeds
from pipeline.policy.stopping import StopStringChecker

# A prefill sub-batch holds prompts up to this factor (plus 16 tokens) longer than its shortest:
# more, smaller forward passes against less padding, which costs a tiny model's prefill the most.
PREFILL_WIDTH_SLACK = 1.25


def load_local_model(
    path: str | os.PathLike, dtype: torch.dtype | str | None = None
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Model and tokenizer from a local HF folder (or the folder a model_ref.json points to);
    never touches the network."""
    from pipeline.policy.model_ref import resolve_model_dir

    path = resolve_model_dir(path)
    if not (path / "config.json").is_file():
        raise InputError(f"{path}: expected a Hugging Face model folder with config.json")
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


def save_hf_folder(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, out_dir: str | os.PathLike
) -> Path:
    """Write a standard HF folder (config.json, model.safetensors, tokenizer files) atomically."""
    from pipeline.io import atomic_dir  # here, so that the backend imports nothing beyond torch and transformers

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)


def _eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(int(i) for i in gen_eos)
    return ids


class HFBackend(TokenizerText):
    """In-process backend. `model` may be shared with a trainer: updates are seen at once."""

    def __init__(
        self,
        model_or_path: torch.nn.Module | str | os.PathLike,
        tokenizer: PreTrainedTokenizerBase | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str | None = None,
        max_batch_size: int = 256,
        max_batch_tokens: int = 32768,
    ):
        if isinstance(model_or_path, (str, os.PathLike)):
            model, loaded_tokenizer = load_local_model(model_or_path, dtype)
            tokenizer = tokenizer or loaded_tokenizer
        else:
            model = model_or_path
            if tokenizer is None:
                raise InputError("tokenizer: expected a tokenizer when passing a model object")
            if dtype is not None:
                model = model.to(dtype=dtype)
        if max_batch_size < 1 or max_batch_tokens < 1:
            raise InputError(
                f"max_batch_size, max_batch_tokens: expected >= 1, got {max_batch_size}, {max_batch_tokens}"
            )
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens  # score: padded tokens per forward pass
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids, default=0))
        self.max_context = int(getattr(model.config, "max_position_embeddings", 1 << 30))

    # -- sampling -----------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        validate_sampling(params, n, len(prompts), self.max_context)
        rows = [truncate_left(p, self.max_context - params.max_new_tokens) for p in prompts for _ in range(n)]
        seeds = sample_seeds(params, len(prompts), n)
        limits = None
        if params.row_max_new_tokens is not None:
            limits = [min(m, params.max_new_tokens) for m in params.row_max_new_tokens for _ in range(n)]
        flat: list[Generation] = []
        with self._inference():
            for start in range(0, len(rows), self.max_batch_size):
                end = start + self.max_batch_size
                flat.extend(self._generate_batch(rows[start:end], params, None if seeds is None else seeds[start:end],
                                                 None if limits is None else limits[start:end]))
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _prefill(
        self, rows: list[list[int]], max_new_tokens: int, shared_prefixes: bool = False
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A decode-ready KV cache with room for `max_new_tokens` (pipeline.policy.kv_cache), and
        the last-token logits, attention mask and last position of every row.

        Each distinct prompt is prefilled once (an Answerer's candidates and the runs of one
        question repeat prompts). Distinct prompts are prefilled in sub-batches of similar length
        (at most `max_batch_tokens` padded tokens each), and each sub-batch's keys and values are
        written, left-padded to the widest prompt, straight into its rows of the decode buffers:
        padding then costs only the decode's attention, not the prefill's linear layers (which
        dominate a tiny model's rollout on CPU), and the cache of all rows is held once rather
        than padded, concatenated, gathered and copied again (2x the cache at the peak).

        With `shared_prefixes`, prompts that start alike (a role's instructions, a question's
        runs) are prefilled as one shared prefix, once, and their suffixes after it: a row's cache
        is then [prefix | padding | suffix], the padding masked."""
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = [distinct.setdefault(tuple(r), len(distinct)) for r in rows]
        prompts = list(distinct)
        rows_of: list[list[int]] = [[] for _ in prompts]
        for row, i in enumerate(row_prompt):
            rows_of[i].append(row)
        groups = shared_prefix_groups(prompts) if shared_prefixes else [(0, list(range(len(prompts))))]
        width = max(len(p) for p in prompts)
        buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        logits = masks = positions = None
        for shared, members in groups:
            prefix = self._prefix_cache(prompts[members[0]][:shared]) if shared else None
            for part in self._length_parts(members, [len(prompts[i]) - shared for i in members]):
                batch = pack_prompt_response([prompts[i][shared:] for i in part], [[] for _ in part], self.pad_id,
                                             self.device)
                s = batch.input_ids.shape[1] - batch.response_length
                part_mask, part_positions = batch.attention_mask[:, :s], batch.position_ids[:, :s] + shared
                cache = DynamicCache(config=self.model.config)
                if prefix is not None:
                    for k, (keys, values) in enumerate(prefix):
                        cache.update(keys.expand(len(part), -1, -1, -1), values.expand(len(part), -1, -1, -1), k)
                    part_mask = torch.cat([part_mask.new_ones((len(part), shared)), part_mask], dim=1)
                part_logits = self.model(
                    input_ids=batch.input_ids[:, :s], attention_mask=part_mask, position_ids=part_positions,
                    past_key_values=cache, use_cache=True, logits_to_keep=1,
                ).logits[:, -1]
                w = shared + s
                source = torch.tensor([j for j, i in enumerate(part) for _ in rows_of[i]], device=self.device)
                target = torch.tensor([row for i in part for row in rows_of[i]], device=self.device)
                left = width - w
                if logits is None:
                    logits = part_logits.new_empty((len(rows), part_logits.shape[-1]))
                    masks = part_mask.new_zeros((len(rows), width))
                    positions = part_positions.new_empty((len(rows),))
                logits[target] = part_logits[source]
                masks[target, left:] = part_mask[source]
                positions[target] = part_positions[source, -1]
                for k, layer in enumerate(cache.layers):
                    if len(buffers) <= k:
                        _, heads, _, dim = layer.keys.shape
                        shape = (len(rows), heads, width + max_new_tokens, dim)
                        buffers.append((layer.keys.new_empty(shape), layer.values.new_empty(shape)))
                    for buffer, filled in zip(buffers[k], (layer.keys, layer.values)):
                        buffer[target, :, :left] = 0  # masked, but garbage there could be NaN
                        buffer[target, :, left:width] = filled[source]
        cache = DynamicCache(config=self.model.config)
        cache.layers = [PreallocatedLayer(keys, values, width) for keys, values in buffers]
        return cache, logits, masks, positions

    def _length_parts(self, members: list[int], lengths: list[int]) -> list[list[int]]:
        """`members` in sub-batches of similar `lengths`, at most `max_batch_tokens` padded tokens each."""
        order = sorted(range(len(members)), key=lambda j: lengths[j])
        parts, part = [], []
        for j in order:
            too_many = (len(part) + 1) * lengths[j] > self.max_batch_tokens
            too_wide = part and lengths[j] > PREFILL_WIDTH_SLACK * lengths[part[0]] + 16
            if part and (too_many or too_wide):
                parts.append(part)
                part = []
            part.append(j)
        parts.append(part)
        return [[members[j] for j in part] for part in parts]

    def _prefix_cache(self, prefix: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values of every layer for one prompt prefix, (1, heads, len, dim) each."""
        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([list(prefix)], device=self.device)
        self.model(input_ids=ids, position_ids=torch.arange(len(prefix), device=self.device)[None],
                   past_key_values=cache, use_cache=True, logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _generate_batch(
        self, rows: list[list[int]], params: SamplingParams, seeds: list[int] | None,
        limits: list[int] | None = None,
    ) -> list[Generation]:
        """Sample every row (at most `limits[row]` tokens when given); a seeded row's draws depend
        on its seed and the token position only."""
        cache, logits, attention_mask, position = self._prefill(rows, params.max_new_tokens, params.shared_prefixes)
        stop_checker = StopStringChecker(self.tokenizer, params.stop)
        tokens_of = [[] for _ in rows]
        logps_of = [[] for _ in rows]
        finish_of = ["length"] * len(rows)
        batch_rows = list(range(len(rows)))  # the original row of each batch row
        active = [True] * len(rows)  # a finished row stays in the batch until half the batch has finished
        row_seeds = None if seeds is None else np.asarray(seeds, dtype=np.uint64)  # per batch row
        for step in range(params.max_new_tokens):
            uniforms = None
            if row_seeds is not None and params.temperature > 0:
                uniforms = torch.from_numpy(keyed_uniforms(row_seeds, step)).to(self.device)
            tokens, logps = sample_next_tokens(logits, params.temperature, params.top_p, uniforms)
            live = [i for i, a in enumerate(active) if a]
            for i, token, logp in zip(live, tokens[live].tolist(), logps[live].tolist()):
                tokens_of[batch_rows[i]].append(token)
                logps_of[batch_rows[i]].append(logp)
            stopped = stop_checker.hits([tokens_of[batch_rows[i]] for i in live])
            for i, hit in zip(live, stopped):
                if hit or tokens_of[batch_rows[i]][-1] in self.eos_ids:
                    active[i] = False
                    finish_of[batch_rows[i]] = "stop"
                elif limits is not None and len(tokens_of[batch_rows[i]]) >= limits[batch_rows[i]]:
                    active[i] = False  # finish "length" at the row's own budget
            if step == params.max_new_tokens - 1 or not any(active):
                break
            if 2 * sum(active) <= len(active):  # compact: the copy is paid once per halving
                keep = torch.tensor([i for i, a in enumerate(active) if a], device=self.device)
                cache.batch_select_indices(keep)
                batch_rows = [batch_rows[i] for i in keep.tolist()]
                if row_seeds is not None:
                    row_seeds = row_seeds[keep.cpu().numpy()]
                active = [True] * len(batch_rows)
                tokens, position, attention_mask = tokens[keep], position[keep], attention_mask[keep]
            position = position + 1
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(batch_rows), 1))], dim=1)
            logits = self.model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=position[:, None],
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
        return [
            Generation(token_ids=ids, logprobs=lps, text=self.decode(ids), finish_reason=reason)
            for ids, lps, reason in zip(tokens_of, logps_of, finish_of)
        ]

    # -- teacher forcing ----------------------------------------------------------------
    def score(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """log softmax(logits / temperature) of every response token given its prefix."""
        validate_scoring(prompts, responses, temperature, self.max_context)
        pairs = [(truncate_left(p, self.max_context - len(r)), list(r)) for p, r in zip(prompts, responses)]
        scores: list[list[float]] = [[] for _ in pairs]
        with self._inference():
            for chunk in self._score_chunks(pairs):
                batch = pack_prompt_response(
                    [pairs[i][0] for i in chunk], [pairs[i][1] for i in chunk], self.pad_id, self.device
                )
                logp, _ = response_logprobs(
                    self.model, batch.input_ids, batch.attention_mask, batch.response_length,
                    temperature=temperature, position_ids=batch.position_ids,
                )
                for row, i in enumerate(chunk):
                    scores[i] = logp[row, : len(pairs[i][1])].tolist()
        return scores

    def _score_chunks(self, pairs: list[tuple[list[int], list[int]]]) -> Iterator[list[int]]:
        """Indices of non-empty responses, similar lengths together (less padding), at most
        max_batch_size rows and max_batch_tokens padded tokens per chunk."""
        order = sorted(
            (i for i, (_, r) in enumerate(pairs) if r), key=lambda i: len(pairs[i][0]) + len(pairs[i][1])
        )
        chunk: list[int] = []
        width_p = width_r = 0
        for i in order:
            new_p, new_r = max(width_p, len(pairs[i][0])), max(width_r, len(pairs[i][1]))
            too_many = len(chunk) == self.max_batch_size
            too_wide = (len(chunk) + 1) * (new_p + new_r) > self.max_batch_tokens
            if chunk and (too_many or too_wide):
                yield chunk
                chunk, new_p, new_r = [], len(pairs[i][0]), len(pairs[i][1])
            chunk.append(i)
            width_p, width_r = new_p, new_r
        if chunk:
            yield chunk

    @contextlib.contextmanager
    def _inference(self) -> Iterator[None]:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.model.train(was_training)
