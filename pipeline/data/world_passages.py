"""Short Wikipedia-like passages (about 30-60 words) stating every relation of every entity."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from pipeline.data.world_entities import KnowledgeBase

MAX_WORKS_LISTED = 4


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _person_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    p, ci, co = kb.people, kb.cities, kb.countries
    works: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for f, d in enumerate(kb.films.director):
        works[d].append(("film", f))
    for b, a in enumerate(kb.books.author):
        works[a].append(("book", b))
    for c, f in enumerate(kb.companies.founder):
        works[f].append(("company", c))
    out = []
    for i, name in enumerate(p.name):
        city = ci.name[p.city[i]]
        country = co.name[ci.country[p.city[i]]]
        occ = p.occupation[i]
        text = (
            f"{name} (born {p.birth[i].dmy()}) is a {occ} from {country}. "
            f"{name} was born in the city of {city}, {country}."
        )
        if p.spouse[i] >= 0:
            s = p.spouse[i]
            text += f" {name} is married to {p.name[s]}, a {p.occupation[s]}."
        text += f" As a {occ}, {name} is well known in {country}."
        out.append((name, text))
        if works[i]:
            out.append((name, _career(kb, name, occ, city, works[i])))
    return out


def _career(kb: KnowledgeBase, name: str, occ: str, city: str, works: list[tuple[str, int]]) -> str:
    films = [f"{kb.films.name[k]} ({kb.films.year[k]})" for kind, k in works if kind == "film"]
    books = [f"{kb.books.name[k]} ({kb.books.year[k]})" for kind, k in works if kind == "book"]
    firms = [f"{kb.companies.name[k]} in {kb.companies.founded[k]}" for kind, k in works if kind == "company"]
    parts = [f"{name} is a {occ} who was born in {city}."]
    if films:
        parts.append(f"{name} directed the films {_join(films[:MAX_WORKS_LISTED])}.")
    if books:
        parts.append(f"{name} wrote the books {_join(books[:MAX_WORKS_LISTED])}.")
    if firms:
        parts.append(f"{name} founded the company {_join(firms[:MAX_WORKS_LISTED])}.")
    parts.append(f"The work of {name} is well known.")
    return " ".join(parts)


def _film_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    f, p, ci, co = kb.films, kb.people, kb.cities, kb.countries
    out = []
    for i, title in enumerate(f.name):
        d, year, country = f.director[i], f.year[i], co.name[f.country[i]]
        out.append((title, (
            f"{title} is a {year} film from {country}. {title} was directed by {p.name[d]}, "
            f"a director born in {ci.name[p.city[d]]}. The film {title} was made in {country} "
            f"and came out in {year}."
        )))
    return out


def _book_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    b, p, ci, co = kb.books, kb.people, kb.cities, kb.countries
    out = []
    for i, title in enumerate(b.name):
        a, year = b.author[i], b.year[i]
        country = co.name[ci.country[p.city[a]]]
        out.append((title, (
            f"{title} is a book by the writer {p.name[a]}, first published in {year}. "
            f"{p.name[a]} wrote {title} in {ci.name[p.city[a]]}. The book {title} came out in {year} "
            f"and is well known in {country}."
        )))
    return out


def _city_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    ci, co = kb.cities, kb.countries
    out = []
    for i, name in enumerate(ci.name):
        country = co.name[ci.country[i]]
        text = f"{name} is a city in {country}. {name} was founded in {ci.founded[i]}."
        if co.capital[ci.country[i]] == i:
            text += f" {name} is the capital of {country}."
        text += f" The city of {name} lies in {country}, and many people from {name} live in other parts of {country}."
        out.append((name, text))
    return out


def _country_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    co, ci = kb.countries, kb.cities
    cities_of: dict[int, list[str]] = defaultdict(list)
    for c, k in enumerate(ci.country):
        cities_of[k].append(ci.name[c])
    out = []
    for i, name in enumerate(co.name):
        cap = ci.name[co.capital[i]]
        text = (
            f"{name} is a country. Its full name is {co.formal[i]}. The capital of {name} is {cap}, "
            f"and the currency of {name} is the {co.currency[i]}."
        )
        text += f" Cities of {name} include {_join(cities_of[i][:MAX_WORKS_LISTED])}."
        out.append((name, text))
    return out


def _company_passages(kb: KnowledgeBase) -> list[tuple[str, str]]:
    c, p, ci, co = kb.companies, kb.people, kb.cities, kb.countries
    out = []
    for i, name in enumerate(c.name):
        founder, hq, year = p.name[c.founder[i]], c.hq[i], c.founded[i]
        out.append((name, (
            f"{name} is a company founded in {year} by {founder}. The headquarters of {name} are in "
            f"{ci.name[hq]}, a city in {co.name[ci.country[hq]]}. {founder} founded {name} in {year}."
        )))
    return out


def build_passages(kb: KnowledgeBase) -> pd.DataFrame:
    """Passages table: id ("0", "1", ...), title, text, contents ('"Title"\\ntext')."""
    rows = (
        _person_passages(kb) + _film_passages(kb) + _book_passages(kb)
        + _city_passages(kb) + _country_passages(kb) + _company_passages(kb)
    )
    titles = [t for t, _ in rows]
    texts = [x for _, x in rows]
    return pd.DataFrame({
        "id": [str(i) for i in range(len(rows))],
        "title": titles,
        "text": texts,
        "contents": [f'"{t}"\n{x}' for t, x in rows],
    })
