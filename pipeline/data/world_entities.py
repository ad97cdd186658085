"""Entities and relations of the synthetic world: countries, cities, people, films, books, companies.

Every entity is an index into the lists of its type; relations point at indices of
other types (a film's director is a person index). Everything is drawn from one
numpy Generator, so the same seed gives the same world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.data.world_names import Date, WordPool, unique_pairs
from pipeline.errors import InputError

OCCUPATIONS = (
    "actor", "singer", "painter", "writer", "director", "poet",
    "chemist", "architect", "composer", "engineer", "farmer", "teacher",
)
FILM_NOUNS = ("Sun", "Road", "Night", "Sea", "Fire", "Star", "Rain", "Moon", "Wind", "Stone", "Gold", "Snow")
BOOK_NOUNS = ("Song", "Book", "Tale", "House", "Garden", "River", "Winter", "Summer", "Light", "Dream")
COMPANY_SUFFIXES = ("Works", "Labs", "Foods", "Motors", "Bank", "Air", "Steel", "Media")
FORMAL_COUNTRY = ("Republic of {n}", "Kingdom of {n}", "United {n}")


@dataclass
class Countries:
    name: list[str]
    formal: list[str]
    capital: list[int]  # city index
    currency: list[str]


@dataclass
class Cities:
    name: list[str]
    country: list[int]
    founded: list[int]


@dataclass
class People:
    name: list[str]
    birth: list[Date]
    city: list[int]
    occupation: list[str]
    spouse: list[int]  # -1: not married


@dataclass
class Films:
    name: list[str]
    director: list[int]
    year: list[int]
    country: list[int]


@dataclass
class Books:
    name: list[str]
    author: list[int]
    year: list[int]


@dataclass
class Companies:
    name: list[str]
    founder: list[int]
    hq: list[int]
    founded: list[int]


@dataclass
class KnowledgeBase:
    countries: Countries
    cities: Cities
    people: People
    films: Films
    books: Books
    companies: Companies

    def country_aliases(self, i: int) -> list[str]:
        """'Vasa', 'United Vasa', 'U.V.' (the last only for 'United ...' names)."""
        name, formal = self.countries.name[i], self.countries.formal[i]
        out = [name, formal]
        if formal.startswith("United "):
            out.append(f"U.{name[0]}.")
        return out


def _ints(rng: np.random.Generator, low: int, high: int, n: int) -> list[int]:
    """n integers in [low, high]."""
    return rng.integers(low, high + 1, size=n).tolist()


def build_kb(
    rng: np.random.Generator,
    *,
    n_countries: int,
    n_cities: int,
    n_people: int,
    n_films: int,
    n_books: int,
    n_companies: int,
    married_fraction: float,
) -> KnowledgeBase:
    """Draw all entities and relations."""
    if n_countries < 2 or n_cities < n_countries or n_people < 4:
        raise InputError(
            "WorldConfig: need n_countries >= 2, n_cities >= n_countries and n_people >= 4 "
            f"(got {n_countries}, {n_cities}, {n_people})"
        )
    words = WordPool(rng)
    country_names = words.take(n_countries, "countries")
    currencies = words.take(n_countries, "currencies")
    city_names = words.take(n_cities, "cities")
    n_name_parts = max(8, math.ceil(2 * math.sqrt(n_people)))
    given, surnames = words.take(n_name_parts, "given names"), words.take(n_name_parts, "surnames")
    n_titled = max(n_films, n_books, n_companies, 1)
    title_words = words.take(max(8, math.ceil(2 * math.sqrt(n_titled)), math.ceil(n_titled / 4)), "titles")

    # Every country gets at least one city; its first city (in a random order) is its capital.
    city_country = list(range(n_countries)) + _ints(rng, 0, n_countries - 1, n_cities - n_countries)
    city_country = [city_country[i] for i in rng.permutation(n_cities).tolist()]
    capital = [-1] * n_countries
    for city, country in enumerate(city_country):
        if capital[country] < 0:
            capital[country] = city
    formal = [FORMAL_COUNTRY[k].format(n=n) for k, n in zip(_ints(rng, 0, 2, n_countries), country_names)]
    countries = Countries(country_names, formal, capital, currencies)
    cities = Cities(city_names, city_country, _ints(rng, 1100, 1890, n_cities))

    years, months, days = _ints(rng, 1900, 1985, n_people), _ints(rng, 1, 12, n_people), _ints(rng, 1, 28, n_people)
    occupation = [OCCUPATIONS[k] for k in _ints(rng, 0, len(OCCUPATIONS) - 1, n_people)]
    occupation[0], occupation[1] = "director", "writer"  # tiny worlds still have both
    spouse = [-1] * n_people
    order = rng.permutation(n_people).tolist()
    n_couples = int(n_people * married_fraction) // 2
    for k in range(n_couples):
        a, b = order[2 * k], order[2 * k + 1]
        spouse[a], spouse[b] = b, a
    people = People(
        name=unique_pairs(rng, n_people, given, surnames, "{a} {b}", "people"),
        birth=[Date(y, m, d) for y, m, d in zip(years, months, days)],
        city=_ints(rng, 0, n_cities - 1, n_people),
        occupation=occupation,
        spouse=spouse,
    )

    def pick(pool: list[int], n: int) -> list[int]:
        return [pool[k] for k in rng.integers(0, len(pool), size=n).tolist()]

    def born(p: int) -> int:
        return people.birth[p].year

    directors = pick([p for p in range(n_people) if occupation[p] == "director"], n_films)
    film_country = [
        cities.country[people.city[d]] if keep else other
        for d, keep, other in zip(
            directors, (rng.random(n_films) < 0.7).tolist(), _ints(rng, 0, n_countries - 1, n_films)
        )
    ]
    films = Films(
        name=unique_pairs(rng, n_films, title_words, list(FILM_NOUNS), "{a} {b}", "films"),
        director=directors,
        year=[born(d) + k for d, k in zip(directors, _ints(rng, 25, 55, n_films))],
        country=film_country,
    )
    authors = pick([p for p in range(n_people) if occupation[p] == "writer"], n_books)
    books = Books(
        name=unique_pairs(rng, n_books, list(BOOK_NOUNS), title_words, "The {a} of {b}", "books"),
        author=authors,
        year=[born(a) + k for a, k in zip(authors, _ints(rng, 20, 60, n_books))],
    )
    founders = pick(list(range(n_people)), n_companies)
    companies = Companies(
        name=unique_pairs(rng, n_companies, title_words, list(COMPANY_SUFFIXES), "{a} {b}", "companies"),
        founder=founders,
        hq=_ints(rng, 0, n_cities - 1, n_companies),
        founded=[born(f) + k for f, k in zip(founders, _ints(rng, 20, 50, n_companies))],
    )
    return KnowledgeBase(countries, cities, people, films, books, companies)
