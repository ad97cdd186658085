"""The world's relations and the question templates that ask about them.

Each relation has a plain question (`ask`, used for sub-questions and as the last hop
of a composed question), single-hop templates per dataset style, and, when its value
is an entity, noun phrases ("the director of {s}", "the person who directed {s}")
that chain it into multi-hop questions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.data.world_entities import KnowledgeBase
from pipeline.data.world_names import Date


@dataclass(frozen=True)
class Relation:
    key: str
    subject: str  # entity type of the subject
    target: str | None  # entity type of the value; None: a literal (date, year, word)
    ask: str
    styles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    noun: str = ""
    clause: str = ""


RELATIONS: tuple[Relation, ...] = (
    Relation("person.birth_date", "person", None, "When was {s} born?", {
        "nq": ("when was {s} born", "what is the date of birth of {s}"),
        "triviaqa": ("On what date was {s} born?",),
        "popqa": ("What is the birth date of {s}?",)}),
    Relation("person.birth_city", "person", "city", "Where was {s} born?", {
        "nq": ("where was {s} born", "what city was {s} born in"),
        "triviaqa": ("In which city was {s} born?",),
        "popqa": ("In what city was {s} born?",)},
        noun="the birthplace of {s}", clause="the city where {s} was born"),
    Relation("person.occupation", "person", None, "What is the occupation of {s}?", {
        "nq": ("what does {s} do for a living", "what is the job of {s}"),
        "triviaqa": ("What was the profession of {s}?",),
        "popqa": ("What is {s}'s occupation?",)}),
    Relation("person.spouse", "person", "person", "Who is the spouse of {s}?", {
        "nq": ("who is {s} married to", "who is the husband or wife of {s}"),
        "triviaqa": ("To whom is {s} married?",),
        "popqa": ("Who is {s}'s spouse?",)},
        noun="the spouse of {s}", clause="the person married to {s}"),
    Relation("film.director", "film", "person", "Who directed {s}?", {
        "nq": ("who directed the film {s}", "who is the director of {s}"),
        "triviaqa": ("Which director made the film {s}?",),
        "popqa": ("Who was the director of {s}?",)},
        noun="the director of {s}", clause="the person who directed {s}"),
    Relation("film.year", "film", None, "When was {s} released?", {
        "nq": ("when did the film {s} come out", "what year was {s} released"),
        "triviaqa": ("In which year was the film {s} released?",),
        "popqa": ("What year did {s} come out?",)}),
    Relation("film.country", "film", "country", "Which country is the film {s} from?", {
        "nq": ("what country is the film {s} from", "where was the film {s} made"),
        "triviaqa": ("The film {s} was made in which country?",),
        "popqa": ("What country is {s} from?",)},
        noun="the country of origin of {s}", clause="the country where {s} was made"),
    Relation("book.author", "book", "person", "Who wrote {s}?", {
        "nq": ("who wrote the book {s}", "who is the author of {s}"),
        "triviaqa": ("Which writer wrote the book {s}?",),
        "popqa": ("Who was the author of {s}?",)},
        noun="the author of {s}", clause="the person who wrote {s}"),
    Relation("book.year", "book", None, "When was {s} published?", {
        "nq": ("when was {s} published", "what year did the book {s} come out"),
        "triviaqa": ("In which year was the book {s} first published?",),
        "popqa": ("What year was {s} published?",)}),
    Relation("city.country", "city", "country", "Which country is {s} in?", {
        "nq": ("what country is {s} in", "where is the city of {s}"),
        "triviaqa": ("The city of {s} is in which country?",),
        "popqa": ("In what country is {s}?",)},
        noun="the country of {s}", clause="the country where {s} is"),
    Relation("city.founded", "city", None, "When was {s} founded?", {
        "nq": ("when was the city of {s} founded", "what year was {s} founded"),
        "triviaqa": ("In which year was the city of {s} founded?",),
        "popqa": ("What year was the city {s} founded?",)}),
    Relation("country.capital", "country", "city", "What is the capital of {s}?", {
        "nq": ("what is the capital of {s}", "what city is the capital of {s}"),
        "triviaqa": ("Which city is the capital of {s}?",),
        "popqa": ("What is {s}'s capital?",)},
        noun="the capital of {s}", clause="the city that is the capital of {s}"),
    Relation("country.currency", "country", None, "What is the currency of {s}?", {
        "nq": ("what is the currency of {s}", "what money is used in {s}"),
        "triviaqa": ("What is the currency of the country {s}?",),
        "popqa": ("What currency is used in {s}?",)}),
    Relation("company.founder", "company", "person", "Who founded {s}?", {
        "nq": ("who founded {s}", "who is the founder of {s}"),
        "triviaqa": ("Which person founded the company {s}?",),
        "popqa": ("Who was the founder of {s}?",)},
        noun="the founder of {s}", clause="the person who founded {s}"),
    Relation("company.hq", "company", "city", "Where is {s} headquartered?", {
        "nq": ("where is {s} headquartered", "where is the headquarters of {s}"),
        "triviaqa": ("In which city is the company {s} based?",),
        "popqa": ("In what city is {s} headquartered?",)},
        noun="the headquarters city of {s}", clause="the city where {s} is based"),
    Relation("company.founded", "company", None, "When was {s} founded?", {
        "nq": ("when was the company {s} founded", "what year was {s} started"),
        "triviaqa": ("In which year was the company {s} founded?",),
        "popqa": ("What year was {s} established?",)}),
)
BY_KEY = {r.key: r for r in RELATIONS}

# Chains that walk straight back (spouse of the spouse, country of the capital) are not asked.
LOOPS = {("person.spouse", "person.spouse"), ("country.capital", "city.country")}


def count(kb: KnowledgeBase, kind: str) -> int:
    """Number of entities of a type."""
    return len(_table(kb, kind).name)


def name(kb: KnowledgeBase, kind: str, i: int) -> str:
    return _table(kb, kind).name[i]


def _table(kb: KnowledgeBase, kind: str) -> Any:
    return {
        "person": kb.people, "film": kb.films, "book": kb.books,
        "city": kb.cities, "country": kb.countries, "company": kb.companies,
    }[kind]


def value(kb: KnowledgeBase, key: str, i: int) -> Any:
    """The relation's value for subject i: an entity index, a Date, an int year or a word; None if absent."""
    p, f, b, ci, co, c = kb.people, kb.films, kb.books, kb.cities, kb.countries, kb.companies
    match key:
        case "person.birth_date":
            return p.birth[i]
        case "person.birth_city":
            return p.city[i]
        case "person.occupation":
            return p.occupation[i]
        case "person.spouse":
            return p.spouse[i] if p.spouse[i] >= 0 else None
        case "film.director":
            return f.director[i]
        case "film.year":
            return f.year[i]
        case "film.country":
            return f.country[i]
        case "book.author":
            return b.author[i]
        case "book.year":
            return b.year[i]
        case "city.country":
            return ci.country[i]
        case "city.founded":
            return ci.founded[i]
        case "country.capital":
            return co.capital[i]
        case "country.currency":
            return co.currency[i]
        case "company.founder":
            return c.founder[i]
        case "company.hq":
            return c.hq[i]
        case "company.founded":
            return c.founded[i]
    raise KeyError(key)


def aliases(kb: KnowledgeBase, rel: Relation, v: Any) -> list[str]:
    """Gold answer aliases of a relation value, the passage's own form first."""
    if rel.target == "country":
        return kb.country_aliases(v)
    if rel.target is not None:
        return [name(kb, rel.target, v)]
    if isinstance(v, Date):
        return v.aliases()
    return [str(v)]


def order_key(v: Any) -> int:
    """A number that orders comparable values (dates, years)."""
    return v.ordinal() if isinstance(v, Date) else int(v)
