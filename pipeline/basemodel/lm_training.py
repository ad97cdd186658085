"""Plain-torch training loops for the tiny model: packed LM pre-training and supervised
fine-tuning on prompt/completion pairs (loss on the completion only, or on the completion
tokens a mask marks: a multi-turn transcript whose observations are context only).

Both: AdamW, linear warm-up then cosine decay, gradient clipping at 1.0, optionally
bfloat16 autocast and another attention kernel while training, a tqdm bar,
`log_fn(step, metrics)` after every step, deterministic for a given seed and thread count
(they use whatever `torch.set_num_threads` the caller set).

CPU speed (tiny model, 2 cores, bf16; `benchmarks/bench_lm_training.py`): batches of
ever-new shapes are slow and leave memory behind, so SFT pads widths to a multiple of
`pad_to_multiple_of` tokens (1.2x faster, 1.3 GB less at peak); the eager attention
kernel pre-trains 1.14x faster than SDPA's on 256-token windows (generation stays
faster with SDPA, so the kernel is switched for training only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase, get_cosine_schedule_with_warmup

from pipeline.basemodel.memory import trim_heap
from pipeline.errors import InputError
from pipeline.policy.encoding import encode_prompt_ids, encode_text_ids

LogFn = Callable[[int, dict], None]
Example = tuple[str, str] | tuple[Sequence[int], Sequence[int]] | tuple[Sequence[int], Sequence[int], Sequence[int]]

GRAD_CLIP = 1.0
TRIM_EVERY = 100  # steps between handing freed heap memory back (basemodel.memory)


def _optimizer_and_schedule(
    model: torch.nn.Module, lr: float, steps: int, warmup_steps: int | None, weight_decay: float
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    if steps < 1:
        raise InputError(f"steps: expected >= 1, got {steps}")
    if lr <= 0:
        raise InputError(f"lr: expected > 0, got {lr}")
    warmup = max(1, steps // 10) if warmup_steps is None else warmup_steps
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
    )
    return optimizer, get_cosine_schedule_with_warmup(optimizer, warmup, steps)


def _step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LambdaLR,
    loss: torch.Tensor,
) -> dict:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    lr = schedule.get_last_lr()[0]
    optimizer.step()
    schedule.step()
    return {"loss": float(loss.detach()), "grad_norm": float(grad_norm), "lr": lr}


def _causal_lm_loss(
    model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Token-mean next-token loss over the labelled positions (-100: ignored), the same
    value as the model's own `labels=` loss. The output layer runs on the labelled
    positions only: in SFT most positions are context, and the vocabulary projection
    is a large share of a tiny model's compute."""
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][keep]).float()
    return torch.nn.functional.cross_entropy(logits, targets[keep])


@contextlib.contextmanager
def attention_kernel(model: torch.nn.Module, implementation: str | None) -> Iterator[None]:
    """Run with another attention kernel (e.g. "eager"), then restore the model's own
    (a saved model keeps the kernel it was loaded with)."""
    previous = getattr(model.config, "_attn_implementation", None)
    if implementation is None or implementation == previous:
        yield
        return
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def _run(
    model: torch.nn.Module,
    batches: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    *,
    steps: int,
    lr: float,
    warmup_steps: int | None,
    weight_decay: float,
    log_fn: LogFn | None,
    desc: str,
    bf16: bool = False,
    attention: str | None = None,
) -> list[dict]:
    """The loop both trainers share: `batches()` gives (input_ids, labels, attention_mask).
    `bf16`: forward under bfloat16 autocast (weights and optimizer stay float32).
    `attention`: the attention kernel to train with ("eager", "sdpa"; None: the model's)."""
    optimizer, schedule = _optimizer_and_schedule(model, lr, steps, warmup_steps, weight_decay)
    with attention_kernel(model, attention):
        return _loop(model, batches, optimizer, schedule, steps, log_fn, desc, bf16)


def _loop(
    model: torch.nn.Module,
    batches: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LambdaLR,
    steps: int,
    log_fn: LogFn | None,
    desc: str,
    bf16: bool,
) -> list[dict]:
    device_type = _device(model).type
    model.train()
    history = []
    bar = tqdm(range(1, steps + 1), desc=desc, leave=False)
    for step in bar:
        input_ids, labels, attention_mask = batches()
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            loss = _causal_lm_loss(model, input_ids, labels, attention_mask)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{desc}: loss became {float(loss)} at step {step}")
        metrics = _step(model, optimizer, schedule, loss)
        history.append(metrics)
        bar.set_postfix(loss=f"{metrics['loss']:.3f}")
        if log_fn is not None:
            log_fn(step, metrics)
        if step % TRIM_EVERY == 0:
            trim_heap()
    model.eval()
    trim_heap()
    return history


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def pretrain_lm(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Iterable[str],
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
    lr: float,
    seed: int,
    warmup_steps: int | None = None,
    weight_decay: float = 0.1,
    log_fn: LogFn | None = None,
    bf16: bool = False,
    attention: str | None = None,
) -> list[dict]:
    """Next-token prediction on random windows of the texts concatenated with eos between
    them. Returns the per-step metrics (loss, grad_norm, lr). `bf16`, `attention`: see `_run`."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise InputError("tokenizer: expected an eos token to separate the texts")
    max_len = int(getattr(model.config, "max_position_embeddings", seq_len))
    if not 1 <= seq_len <= max_len:
        raise InputError(f"seq_len: expected 1..{max_len} (the model's context), got {seq_len}")
    stream: list[int] = []
    for text in texts:
        stream.extend(encode_text_ids(tokenizer, text))
        stream.append(eos)
    if len(stream) < seq_len + 1:
        raise InputError(f"texts: expected at least {seq_len + 1} tokens in all, got {len(stream)}")
    data = torch.tensor(stream, dtype=torch.long)
    device = _device(model)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(seq_len)

    def batches() -> tuple[torch.Tensor, torch.Tensor, None]:
        starts = torch.randint(0, len(data) - seq_len, (batch_size,), generator=generator)
        window = data[starts[:, None] + offsets].to(device)
        return window, window, None  # the loss shifts the labels itself

    return _run(model, batches, steps=steps, lr=lr, warmup_steps=warmup_steps,
                weight_decay=weight_decay, log_fn=log_fn, desc="pretrain", bf16=bf16, attention=attention)


def encode_examples(
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Example],
    max_len: int,
    append_eos: bool = True,
) -> list[tuple]:
    """(prompt ids, completion ids) per example, fitted into `max_len` tokens.

    Text prompts are encoded exactly like a rollout's (`encode_prompt_ids`); text
    completions get eos appended when `append_eos`. Id pairs are used as they are; id
    triples (prompt, completion, loss mask over the completion: 1 = trained, 0 = context
    such as an observation) keep their mask and come back as triples.
    Too-long examples lose prompt tokens from the left (then completion tokens from the right).
    """
    encoded: list[tuple] = []
    for i, example in enumerate(examples):
        if len(example) not in (2, 3):
            raise InputError(f"examples[{i}]: expected a (prompt, completion) pair or an id triple with a mask")
        prompt, completion = example[0], example[1]
        if isinstance(prompt, str) != isinstance(completion, str) or (len(example) == 3 and isinstance(prompt, str)):
            raise InputError(f"examples[{i}]: expected both texts or both id lists")
        if isinstance(prompt, str):
            prompt_ids = encode_prompt_ids(tokenizer, prompt)
            completion_ids = encode_text_ids(tokenizer, completion)
            if append_eos:
                completion_ids.append(tokenizer.eos_token_id)
        else:
            prompt_ids, completion_ids = [int(t) for t in prompt], [int(t) for t in completion]
        if not completion_ids:
            raise InputError(f"examples[{i}]: expected a non-empty completion")
        completion_ids = completion_ids[: max_len - 1]
        prompt_ids = prompt_ids[max(0, len(prompt_ids) - (max_len - len(completion_ids))) :]
        if len(example) == 3:
            mask = [int(bool(m)) for m in example[2]]
            if len(mask) < len(completion_ids):
                raise InputError(f"examples[{i}]: expected one mask value per completion token")
            encoded.append((prompt_ids, completion_ids, mask[: len(completion_ids)]))
        else:
            encoded.append((prompt_ids, completion_ids))
    return encoded


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, window: int = 32
) -> list[list[int]]:
    """One epoch of batches: a random permutation cut into windows of `window` batches,
    each window sorted by length and cut into batches, the batches then shuffled. Batches
    hold examples of similar length, so padding costs little and the order stays random."""
    perm = torch.randperm(len(lengths), generator=generator).tolist()
    span = batch_size * max(1, window)
    batches: list[list[int]] = []
    for start in range(0, len(perm), span):
        chunk = sorted(perm[start : start + span], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


def supervised_finetune(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Example],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    warmup_steps: int | None = None,
    weight_decay: float = 0.0,
    append_eos: bool = True,
    group_by_length: bool = False,
    pad_to_multiple_of: int = 32,
    log_fn: LogFn | None = None,
    bf16: bool = False,
    attention: str | None = None,
) -> list[dict]:
    """Fine-tune on prompt/completion pairs; loss (token mean) on completion tokens only
    (those the mask marks, for id triples). Batches are drawn uniformly at random with
    replacement, or (`group_by_length`) as epochs of length-grouped batches
    (`length_grouped_batches`): the same examples with far less padding.

    Rows are right-padded to a width that is a multiple of `pad_to_multiple_of` (capped at
    the model's context), and no attention mask is passed: under causal attention a real
    token only sees earlier positions, all real, so the padding changes no labelled
    position's loss (tested), and the unmasked kernels are faster. `bf16`, `attention`: see `_run`."""
    if pad_to_multiple_of < 1:
        raise InputError(f"pad_to_multiple_of: expected >= 1, got {pad_to_multiple_of}")
    if not examples:
        raise InputError("examples: expected at least one (prompt, completion) pair")
    max_len = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    encoded = encode_examples(tokenizer, examples, max_len, append_eos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = _device(model)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    lengths = [len(e[0]) + len(e[1]) for e in encoded]
    queue: list[list[int]] = []

    def picks() -> list[int]:
        if not group_by_length:
            return torch.randint(0, len(encoded), (batch_size,), generator=generator).tolist()
        if not queue:
            queue.extend(reversed(length_grouped_batches(lengths, batch_size, generator)))
        return queue.pop()

    def batches() -> tuple[torch.Tensor, torch.Tensor, None]:
        rows = [encoded[i] for i in picks()]
        width = max(len(r[0]) + len(r[1]) for r in rows)
        width = min(-(-width // pad_to_multiple_of) * pad_to_multiple_of, max_len)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for row, example in enumerate(rows):
            prompt, completion = example[0], example[1]
            ids = torch.tensor(prompt + completion, dtype=torch.long)
            input_ids[row, : len(ids)] = ids
            target = ids[len(prompt) :].clone()
            if len(example) == 3:
                target[torch.tensor(example[2], dtype=torch.bool).logical_not()] = -100
            labels[row, len(prompt) : len(ids)] = target
        return input_ids.to(device), labels.to(device), None

    return _run(model, batches, steps=steps, lr=lr, warmup_steps=warmup_steps,
                weight_decay=weight_decay, log_fn=log_fn, desc="sft", bf16=bf16, attention=attention)
