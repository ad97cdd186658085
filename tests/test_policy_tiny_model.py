"""Tokenizer, tiny Qwen3 construction/saving and the LM training loops."""

from __future__ import annotations

import copy
import os
import random
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.basemodel.lm_training import encode_examples, pretrain_lm, supervised_finetune
from pipeline.basemodel.tiny_model import build_tiny_qwen3, count_parameters
from pipeline.basemodel.tokenizer import EOS_TOKEN, PAD_TOKEN, PROTOCOL_TAGS, train_bpe_tokenizer
from pipeline.errors import InputError
from pipeline.policy.encoding import encode_prompt_ids
from pipeline.policy.hf_backend import save_hf_folder

SYLLABLES = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "da", "pe"]


def synthetic_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        name = rng.choice(SYLLABLES) + rng.choice(SYLLABLES)
        place = rng.choice(SYLLABLES).title() + rng.choice(SYLLABLES)
        texts.append(f"{name.title()} was born in {place} in {1900 + i % 100}. {name} likes {place}!")
    return texts


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(synthetic_texts(300), vocab_size=600)


def small_model(tokenizer, seed: int = 0):
    return build_tiny_qwen3(
        tokenizer, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
        intermediate_size=64, max_position_embeddings=128, seed=seed,
    )


# -- tokenizer -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Kalo was born in Mira in 1923.\nSecond line,\twith a tab; and: punctuation?!",
        "  two leading spaces and trailing  ",
        "Zoë naïve café — 東京 ✓ 🎉 Ωmega",
        "<think>plan</think>\n<search>kalo birthplace</search>",
        "<information>Doc 1(Title: \"Kalo\") text</information><answer>Mira</answer>",
        "digits 0123456789 and 3.14159, -42",
        "",
    ],
)
def test_decode_round_trips(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_decode_round_trips_any_text(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_protocol_tags_are_single_non_special_tokens(tokenizer):
    special_ids = set(tokenizer.all_special_ids)
    for tag in PROTOCOL_TAGS:
        ids = tokenizer.encode(tag, add_special_tokens=False)
        assert len(ids) == 1, tag
        assert ids[0] not in special_ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == tag
    assert len(PROTOCOL_TAGS) == 18


def test_special_tokens_and_vocab_size(tokenizer):
    assert tokenizer.eos_token == EOS_TOKEN and tokenizer.bos_token == EOS_TOKEN
    assert tokenizer.pad_token == PAD_TOKEN
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert len(tokenizer) <= 600
    assert tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=True) == ""
    with pytest.raises(InputError, match="vocab_size"):
        train_bpe_tokenizer(["abc"], vocab_size=100)
    with pytest.raises(InputError, match="texts"):
        train_bpe_tokenizer([], vocab_size=600)


def test_tokenizer_saved_folder_loads_identically(tokenizer, tmp_path):
    out = tmp_path / "tok"
    train_bpe_tokenizer(synthetic_texts(300), vocab_size=600, out_dir=out)
    loaded = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "Kalo <search>Mira</search> 1923 Zoë"
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert loaded.pad_token_id == tokenizer.pad_token_id


# -- model -----------------------------------------------------------------------------
def test_build_tiny_qwen3_config_and_parameter_count(tokenizer):
    model = build_tiny_qwen3(tokenizer)
    cfg = model.config
    assert cfg.vocab_size == len(tokenizer) and cfg.tie_word_embeddings
    assert (cfg.eos_token_id, cfg.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    h, inter, layers, head_dim = 192, 512, 3, 48
    attention = h * 4 * head_dim + 2 * h * 2 * head_dim + 4 * head_dim * h + 2 * head_dim
    mlp = 3 * h * inter
    expected = len(tokenizer) * h + layers * (attention + mlp + 2 * h) + h
    assert count_parameters(model) == expected
    # the sizing data point: with a 3,000-token vocabulary this config is ~1.8M parameters
    assert 1.75e6 < expected - len(tokenizer) * h + 3000 * h < 1.85e6


def test_build_is_seeded_and_rejects_bad_shapes(tokenizer):
    a, b, c = small_model(tokenizer, 1), small_model(tokenizer, 1), small_model(tokenizer, 2)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    with pytest.raises(InputError, match="hidden_size"):
        build_tiny_qwen3(tokenizer, hidden_size=30, num_heads=4)


def test_save_hf_folder_loads_with_auto_classes(tokenizer, tmp_path):
    model = small_model(tokenizer)
    out = save_hf_folder(model, tokenizer, tmp_path / "model")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    loaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = torch.tensor([encode_prompt_ids(tokenizer, "Kalo was born in")])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits, atol=1e-6)
    save_hf_folder(small_model(tokenizer, seed=5), tokenizer, out)  # replaces the folder whole
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not torch.equal(reloaded.model.embed_tokens.weight, loaded.model.embed_tokens.weight)


# -- training loops --------------------------------------------------------------------
def test_pretrain_lowers_loss_and_logs_every_step(tokenizer):
    logged = []
    history = pretrain_lm(small_model(tokenizer), tokenizer, synthetic_texts(100), steps=30, batch_size=4,
                          seq_len=32, lr=1e-2, seed=0, log_fn=lambda step, m: logged.append((step, m)))
    assert [s for s, _ in logged] == list(range(1, 31))
    assert {"loss", "lr", "grad_norm"} <= set(logged[0][1])
    assert sum(h["loss"] for h in history[-5:]) / 5 < history[0]["loss"] - 1.0
    assert logged[0][1]["lr"] < logged[3][1]["lr"]  # warm-up
    assert logged[-1][1]["lr"] < logged[10][1]["lr"]  # decay


def test_pretrain_is_deterministic_given_the_seed(tokenizer):
    def trained(seed: int) -> torch.Tensor:
        model = small_model(tokenizer)
        pretrain_lm(model, tokenizer, synthetic_texts(50), steps=4, batch_size=2, seq_len=16, lr=1e-2, seed=seed)
        return model.model.embed_tokens.weight

    first = trained(0)
    assert torch.equal(first, trained(0))
    assert not torch.equal(first, trained(1))


def test_pretrain_rejects_bad_input(tokenizer):
    model = small_model(tokenizer)
    with pytest.raises(InputError, match="seq_len"):
        pretrain_lm(model, tokenizer, ["a b"], steps=1, batch_size=1, seq_len=1000, lr=1e-3, seed=0)
    with pytest.raises(InputError, match="texts"):
        pretrain_lm(model, tokenizer, ["a"], steps=1, batch_size=1, seq_len=64, lr=1e-3, seed=0)


def test_sft_loss_is_on_completion_tokens_only(tokenizer):
    model = small_model(tokenizer)
    prompt, completion = "Where was Kalo born?", "<answer>Mira</answer>"
    [(p_ids, c_ids)] = encode_examples(tokenizer, [(prompt, completion)], max_len=128)
    assert c_ids[-1] == tokenizer.eos_token_id and p_ids[0] == tokenizer.bos_token_id
    ids = torch.tensor([p_ids + c_ids])
    with torch.no_grad():
        logp = torch.log_softmax(copy.deepcopy(model)(ids).logits[0, :-1], -1)
    targets = ids[0, 1:]
    per_token = -logp.gather(-1, targets[:, None]).squeeze(-1)
    expected = per_token[len(p_ids) - 1 :].mean().item()
    all_tokens = per_token.mean().item()
    assert abs(expected - all_tokens) > 1e-3  # the test can tell the two apart

    history = supervised_finetune(model, tokenizer, [(prompt, completion)], steps=1, batch_size=1, lr=1e-3, seed=0)
    assert history[0]["loss"] == pytest.approx(expected, abs=1e-4)


def test_sft_memorises_a_completion(tokenizer):
    model = small_model(tokenizer)
    examples = [("Where was Kalo born?", "<answer>Mira</answer>"), ("Who likes Tuso?", "<answer>Vida</answer>")]
    supervised_finetune(model, tokenizer, examples, steps=60, batch_size=2, lr=2e-2, seed=0)
    for prompt, completion in examples:
        ids = torch.tensor([encode_prompt_ids(tokenizer, prompt)])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        assert text == completion


def test_right_padding_needs_no_attention_mask(tokenizer):
    """SFT passes no attention mask: the labelled positions' loss must not depend on it."""
    from pipeline.basemodel.lm_training import _causal_lm_loss

    model = small_model(tokenizer).eval()
    rows = [list(range(5, 25)), list(range(30, 41))]  # 20 and 11 tokens, right-padded to 32
    input_ids = torch.full((2, 32), tokenizer.pad_token_id)
    labels = torch.full((2, 32), -100)
    mask = torch.zeros((2, 32), dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, 4 : len(ids)] = torch.tensor(ids[4:])
        mask[i, : len(ids)] = 1
    for kernel in ("sdpa", "eager"):
        model.set_attn_implementation(kernel)
        with torch.no_grad():
            masked = _causal_lm_loss(model, input_ids, labels, mask)
            unmasked = _causal_lm_loss(model, input_ids, labels, None)
            garbage = input_ids.masked_fill(mask == 0, 7)  # other padding tokens: same loss
            assert torch.allclose(masked, unmasked, atol=1e-6)
            assert torch.allclose(unmasked, _causal_lm_loss(model, garbage, labels, None), atol=1e-6)
            labels_leaky = labels.clone()
            labels_leaky[1, 20] = 9  # a labelled padding position would change the loss
            assert not torch.allclose(unmasked, _causal_lm_loss(model, input_ids, labels_leaky, None), atol=1e-6)


def test_sft_pads_widths_to_a_multiple_and_trains_with_the_requested_kernel(tokenizer):
    model = small_model(tokenizer)
    seen = []

    def record(module, args, kwargs):
        seen.append((kwargs["input_ids"].shape[1], kwargs["attention_mask"], model.config._attn_implementation))

    model.get_decoder().register_forward_pre_hook(record, with_kwargs=True)
    examples = [(f"Where was Kalo{'x' * i} born?", "<answer>Mira</answer>") for i in range(12)]
    supervised_finetune(model, tokenizer, examples, steps=6, batch_size=3, lr=1e-3, seed=0,
                        pad_to_multiple_of=16, attention="eager")
    assert len(seen) == 6
    assert all(width % 16 == 0 and mask is None and kernel == "eager" for width, mask, kernel in seen)
    assert model.config._attn_implementation == "sdpa"  # restored after training
    seen.clear()
    supervised_finetune(model, tokenizer, examples, steps=3, batch_size=3, lr=1e-3, seed=0, pad_to_multiple_of=1)
    assert {kernel for *_, kernel in seen} == {"sdpa"}
    assert any(width % 16 for width, *_ in seen)  # unrounded widths do occur: the test can fail
    with pytest.raises(InputError, match="pad_to_multiple_of"):
        supervised_finetune(model, tokenizer, examples, steps=1, batch_size=1, lr=1e-3, seed=0, pad_to_multiple_of=0)


def test_encode_examples_truncates_prompt_from_left_and_keeps_id_pairs(tokenizer):
    long_prompt = list(range(10, 200))
    [(p, c)] = encode_examples(tokenizer, [(long_prompt, [5, 6, 7])], max_len=50)
    assert c == [5, 6, 7] and p == long_prompt[-47:]
    [(p, c)] = encode_examples(tokenizer, [([1, 2], list(range(100)))], max_len=50)
    assert len(p) + len(c) <= 50 and c == list(range(49)) and p == [2]
    with pytest.raises(InputError, match=r"examples\[0\]"):
        encode_examples(tokenizer, [("text", [1, 2])], max_len=50)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory read from /proc (Linux)")
def test_trim_heap_returns_freed_memory_to_the_os():
    from pipeline.basemodel.memory import trim_heap

    def resident_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    blocks = [bytearray(100_000) for _ in range(1000)]  # ~100 MB of heap blocks (below mmap's threshold)
    pin = bytearray(100_000)  # allocated last: the heap's top stays in use, so nothing is returned by itself
    del blocks
    held = resident_mb()
    assert trim_heap()
    assert resident_mb() < held - 50
    del pin

