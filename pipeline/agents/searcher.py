"""One Searcher: a multi-turn call whose response interleaves generated turns and observations."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.agents.protocol import Malformed, Report, Search, action_name, parse_action
from pipeline.agents.trajectory import Call, Segment
from pipeline.policy.base import Generation, PolicyBackend
from pipeline.retrieval.base import Passage, format_information


def observation_text(passages: Sequence[Passage]) -> str:
    """What the environment appends after a <search>: Search-R1's observation, exactly
    (`'\\n\\n<information>' + body + '</information>\\n\\n'` in its generation.py)."""
    return "\n\n<information>" + format_information(passages) + "</information>\n\n"


class SearcherAgent:
    """Holds the Searcher's sample and decides, turn by turn, whether it goes on."""

    def __init__(self, call: Call, report_id: str, max_turns: int) -> None:
        self.call = call
        self.report_id = report_id
        self.max_turns = max_turns
        self.done = False

    def take_turn(self, gen: Generation, last_step: bool) -> str | None:
        """Record one generated turn; return the query to retrieve, or None once it stops.

        A search on the last step of the budget, or on its last turn, is counted but not
        run: the Searcher is cut with no report (its observation would never be read).
        """
        call = self.call
        call.segments.append(Segment("generated", list(gen.token_ids), list(gen.logprobs), gen.text))
        call.n_turns += 1
        call.output_tokens += len(gen.token_ids)
        call.finish_reason = gen.finish_reason
        parsed = parse_action(gen.text, "searcher")
        call.action = action_name(parsed)
        if isinstance(parsed, Malformed):
            call.malformed, call.malformation, call.malformation_detail = True, parsed.kind, parsed.detail
            self.done = True
            return None
        if isinstance(parsed, Report):
            call.reported, call.report = True, parsed.text
            self.done = True
            return None
        assert isinstance(parsed, Search)
        call.n_search += 1
        call.queries.append(parsed.query)
        if last_step or call.n_turns >= self.max_turns:
            self.cut()
            return None
        return parsed.query

    def observe(self, passages: Sequence[Passage], backend: PolicyBackend) -> None:
        """Append the retrieved passages as observation tokens (never trained on)."""
        text = observation_text(passages)
        ids = list(backend.encode(text))
        self.call.segments.append(Segment("observation", ids, [0.0] * len(ids), text))
        self.call.passages.extend(passages)
        body = format_information(passages)
        self.call.passages_text = f"{self.call.passages_text}\n{body}" if self.call.passages_text else body

    def cut(self) -> None:
        """Stop with whatever report it has (none: a report ends the Searcher by itself)."""
        if not self.done:
            self.call.cut = True
            self.done = True
