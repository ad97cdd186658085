"""Observations are Search-R1's, character for character (docs/method.md §3).

PASSAGES2STRING_CASES writes down what Search-R1's `_passages2string`
(PeterGriffinJin/Search-R1 search_r1/llm_agent/generation.py, and the same function in
infer.py) returns for a list of retrieved documents: per document, in order,
f"Doc {idx+1}(Title: {title}) {text}\\n" with title = contents.split("\\n")[0] and
text = "\\n".join(contents.split("\\n")[1:]). Its generation loop then appends
f"\\n\\n<information>{that.strip()}</information>\\n\\n" after a search.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.agents.searcher import observation_text
from pipeline.retrieval.base import Passage, format_information
from pipeline.retrieval.client import parse_hit

# (the documents' `contents` as stored, `_passages2string` of them)
PASSAGES2STRING_CASES = [
    (['"Absalon"\nAbsalon (1128-1201) was a Danish archbishop.', '"Tappet"\nA tappet is a projection.'],
     ('Doc 1(Title: "Absalon") Absalon (1128-1201) was a Danish archbishop.\n'
      'Doc 2(Title: "Tappet") A tappet is a projection.\n')),
    (["Absalon\ndragged forth and burnt."], "Doc 1(Title: Absalon) dragged forth and burnt.\n"),  # unquoted line
    (['"Havn ""Harbour"""\ncity of ""Havn"" (English: Harbour)'],
     'Doc 1(Title: "Havn ""Harbour""") city of ""Havn"" (English: Harbour)\n'),  # nested quotes kept
    (["no newline at all"], "Doc 1(Title: no newline at all) \n"),
    (['"T"\nline one\nline two'], 'Doc 1(Title: "T") line one\nline two\n'),
    ([' "T" \n  text'], 'Doc 1(Title:  "T" )   text\n'),
    (['"T"\r\ntext'], 'Doc 1(Title: "T"\r) text\n'),
    (["", '"B"\nbeta'], 'Doc 1(Title: ) \nDoc 2(Title: "B") beta\n'),
    (['"A"\nalpha', '"Z"\nends with blanks  \n\n'],
     'Doc 1(Title: "A") alpha\nDoc 2(Title: "Z") ends with blanks  \n\n\n'),
    ([], ""),
]


def _over_http(contents: list[str]) -> list[Passage]:
    """Passages as our client parses a Search-R1 /retrieve answer."""
    return [parse_hit({"document": {"id": str(i), "contents": c}, "score": 0.5}) for i, c in enumerate(contents)]


@pytest.mark.parametrize(("contents", "passages2string"), PASSAGES2STRING_CASES)
def test_information_body_and_observation_are_search_r1s(contents, passages2string):
    passages = _over_http(contents)
    assert format_information(passages) == passages2string.strip()
    assert observation_text(passages) == f"\n\n<information>{passages2string.strip()}</information>\n\n"


def test_passages_of_our_own_corpus_show_the_stored_wiki18_title_line():
    # our corpus and index store '"Title"\ntext' (Passage.contents); the title keeps its quotes
    passages = [Passage("0", "Absalon", "Absalon was a Danish archbishop."), Passage("1", "Tappet", "A tappet.")]
    assert [p.contents for p in passages] == ['"Absalon"\nAbsalon was a Danish archbishop.', '"Tappet"\nA tappet.']
    assert format_information(passages) == (
        'Doc 1(Title: "Absalon") Absalon was a Danish archbishop.\nDoc 2(Title: "Tappet") A tappet.'
    )


def test_the_stored_contents_travel_but_do_not_change_equality():
    (hit,) = _over_http(["Absalon\ndragged forth"])
    assert hit == Passage("0", "Absalon", "dragged forth", 0.5)
    assert hit.contents == "Absalon\ndragged forth"


REAL_TRACE = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real" / "searchr1"
              / "example_rollout_case.txt")


@pytest.mark.real_data
def test_observations_of_a_real_search_r1_rollout_are_rebuilt_exactly():
    if not REAL_TRACE.exists():
        pytest.skip(f"real data not available: {REAL_TRACE}")
    trace = REAL_TRACE.read_text(encoding="utf-8")
    blocks = re.findall(r"</search>(\n\n<information>Doc 1\(.*?</information>\n\n)", trace, re.DOTALL)
    assert len(blocks) == 3
    for block in blocks:
        body = block[len("\n\n<information>"): -len("</information>\n\n")]
        docs = re.split(r"\n(?=Doc \d+\(Title: )", body)
        contents = [re.sub(r"^Doc \d+\(Title: (.*?)\) ", lambda m: m.group(1) + "\n", d, count=1, flags=re.DOTALL)
                    for d in docs]
        assert len(contents) == 3 and all(c.startswith('"') for c in contents)  # wiki-18 titles keep quotes
        assert observation_text(_over_http(contents)) == block
