"""This run's draw record, reports/<profile>/draw.json, and the check of a kept one.

A draw is one full run of the pipeline under a seed set (configs/seed_sets.yaml), a CPU kind
and a precision path (pipeline.draws.identity). Its record holds what the report compares across
draws: every evaluated system's macro avg@k, its forced-answer share, the paper's seven
comparisons as paired-bootstrap gaps beside the published value, each Stage-II system's dev
Searcher KL at its first and last point, and the splits' dedup counts. The draw command
(scripts/draw.py) keeps a copy under reports/<profile>/draws/, adding name (`default_name`:
seed set, precision path and `cpu_tag`), commit, date, stage_minutes and peak_rss_mb;
`check_record` reads those too, and `read_draw_report` reads a record's file through it. Since
the funnel (pipeline.eval.funnel), a record also holds each system's role-level rates and the
paired gaps of the role-level comparisons (`funnel`); older records lack the field, and the
report says "not measured" for them.

A draw is known by what made it, not by its scores: a record holds the content hashes of the
models and evaluation records its numbers came from (`hashes`), and its seed set, CPU kind and
precision come from the records of the stages that made those files (data/runs/), not from the
machine that builds the report. Two kept records with the same model hashes are one draw:
`check_distinct` refuses them, and `scripts/draw.py keep` refuses to keep the second. Records
kept before the hashes existed have none; they cannot be matched, and the report says so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.draws.identity import other_threads
from pipeline.errors import InputError

SCHEMA = 1


def comparison_key(target: str, baseline: str) -> str:
    return f"{target}-{baseline}"


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)  # unrounded: the across-draws table then prints what the comparisons table prints
    return None if math.isnan(value) else value


def _column(results: Any, table: str, column: str) -> dict[str, float | None]:
    return {system: _num(results.value(table, system, column)) for system in results.present}


def draw_record(*, profile: str, identity: Mapping[str, str], test_questions: int, level: int, results: Any,
                gaps: Sequence[Any], kl_ends: Mapping[str, tuple[tuple[int, float], tuple[int, float]]],
                dedup: Mapping[str, int] | None, funnel: Mapping[str, Any] | None = None,
                hashes: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """The record of this run; `results`: pipeline.report.results.Results (any object with its
    `value` and `runs`; this package stays below the report), `identity`: seed_set, cpu and
    precision of the stages that made the outputs (pipeline.tracking.stage_record.joint_identity),
    `gaps`: pipeline.report.comparisons.measure_gaps, `kl_ends`: comparisons.searcher_kl_ends, `funnel`:
    pipeline.report.points.record_entry (None: no system's records have the funnel), `hashes`:
    {"models": {weights: sha256}, "records": {system: sha256}} of the files the numbers came from."""
    return {
        "schema": SCHEMA,
        "profile": profile,
        "seed_set": identity["seed_set"],
        "cpu": identity["cpu"],
        "precision": identity["precision"],
        "threads": identity.get("threads", "unknown"),
        "hashes": {kind: dict(sorted(values.items())) for kind, values in hashes.items()} if hashes else None,
        "test_questions": int(test_questions),
        "runs": int(results.runs),
        "level": int(level),
        "systems": _column(results, "macro", f"avg@{results.runs}"),
        "forced_answer_share": _column(results, "behaviour", "forced_answer_share"),
        "comparisons": {comparison_key(g.target, g.baseline): {
            "target": g.target, "baseline": g.baseline, "diff": _num(g.diff), "low": _num(g.low),
            "high": _num(g.high), "published": _num(g.published[0])} for g in gaps},
        "dev_searcher_kl": {system: {"first": _num(first[1]), "last": _num(last[1])}
                            for system, (first, last) in kl_ends.items()},
        "dedup": dict(dedup) if dedup is not None else None,
        "funnel": _funnel(funnel),
    }


def _funnel(funnel: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if funnel is None:
        return None
    return {"rates": {s: {k: _num(v) for k, v in rates.items()} for s, rates in funnel["rates"].items()},
            "comparisons": {key: {rate: None if gap is None else {n: _num(gap[n]) for n in ("diff", "low", "high")}
                                  for rate, gap in entry.items()} for key, entry in funnel["comparisons"].items()}}


# --------------------------------------------------------------------------- reading a kept draw


def _type_name(kind: str) -> str:
    return {"str": "a string", "int": "a whole number", "num": "a number", "num?": "a number or null",
            "obj": "a JSON object", "obj?": "a JSON object or null", "total?": "null, a number or a JSON object "
            "of numbers"}[kind]


def _is(value: Any, kind: str) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == "num":
        return number and math.isfinite(value)
    if kind == "num?":
        return value is None or (number and math.isfinite(value))
    if kind == "obj":
        return isinstance(value, dict)
    if kind == "obj?":
        return value is None or isinstance(value, dict)
    if kind == "total?":
        return value is None or _is(value, "num") or (isinstance(value, dict)
                                                      and all(_is(v, "num?") for v in value.values()))
    raise ValueError(kind)


class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def need(self, value: Any, field: str, kind: str) -> Any:
        if not _is(value, kind):
            raise InputError(f"{self.path}: field '{field}': expected {_type_name(kind)}, got {value!r}")
        return value

    def get(self, data: dict, field: str, kind: str, prefix: str = "", optional: bool = False) -> Any:
        name = f"{prefix}{field}"
        if field not in data:
            if optional:
                return None
            raise InputError(f"{self.path}: field '{name}' is missing (a draw record of schema {SCHEMA}, "
                             "written by the `report` stage as reports/<profile>/draw.json)")
        return self.need(data[field], name, kind)


REQUIRED = (("seed_set", "str"), ("cpu", "str"), ("precision", "str"), ("test_questions", "int"), ("runs", "int"),
            ("level", "num"), ("systems", "obj"), ("forced_answer_share", "obj"), ("comparisons", "obj"),
            ("dev_searcher_kl", "obj"), ("dedup", "obj?"))
HASH_KINDS = ("models", "records")  # what `hashes` names: the weights and the evaluation records
# what the draw command adds when it keeps a draw
ADDED = (("name", "str"), ("commit", "str"), ("date", "str"), ("stage_minutes", "total?"), ("peak_rss_mb", "total?"))


def check_record(data: Any, path: Path, profile: str) -> dict[str, Any]:
    """`data` (a parsed draw file) checked against the schema; InputError naming the file and
    the field otherwise. Keys beyond the schema and the draw command's are left as they are."""
    c = _Checker(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object (a draw record), got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: field 'schema': expected {SCHEMA}, got {data.get('schema')!r}")
    if c.get(data, "profile", "str") != profile:
        raise InputError(f"{path}: field 'profile': expected {profile!r} (the draws of reports/{profile}/draws/), "
                         f"got {data['profile']!r}")
    for field, kind in (*REQUIRED, *ADDED):
        c.get(data, field, kind, optional=(field, kind) in ADDED)
    for system, value in data["systems"].items():
        c.need(value, f"systems.{system}", "num")
    for system, value in data["forced_answer_share"].items():
        c.need(value, f"forced_answer_share.{system}", "num?")
    for key, entry in data["comparisons"].items():
        prefix = f"comparisons.{key}."
        c.need(entry, f"comparisons.{key}", "obj")
        target, baseline = c.get(entry, "target", "str", prefix), c.get(entry, "baseline", "str", prefix)
        if key != comparison_key(target, baseline):
            raise InputError(f"{path}: field 'comparisons.{key}': expected the key "
                             f"{comparison_key(target, baseline)!r} (target-baseline)")
        values = [c.get(entry, name, "num?", prefix) for name in ("diff", "low", "high")]
        c.get(entry, "published", "num?", prefix)
        if (None in values) != (values.count(None) == 3):
            raise InputError(f"{path}: field 'comparisons.{key}': diff, low and high are all numbers or all null")
    for system, entry in data["dev_searcher_kl"].items():
        c.need(entry, f"dev_searcher_kl.{system}", "obj")
        for name in ("first", "last"):
            c.get(entry, name, "num", f"dev_searcher_kl.{system}.")
    for reason, value in (data["dedup"] or {}).items():
        c.need(value, f"dedup.{reason}", "int")
    _check_funnel(c, data.get("funnel"))
    _check_hashes(c, data.get("hashes"))
    return data


def _check_hashes(c: _Checker, hashes: Any) -> None:
    """The optional `hashes` field (draws kept before it existed have none)."""
    if hashes is None:
        return
    c.need(hashes, "hashes", "obj")
    for kind in HASH_KINDS:
        for name, value in c.get(hashes, kind, "obj", "hashes.").items():
            c.need(value, f"hashes.{kind}.{name}", "str")


# --------------------------------------------------------------------------- one set of models, one draw


def model_hashes(record: Mapping[str, Any]) -> dict[str, str] | None:
    """The content hashes of the models a record came from; None for a record kept without them."""
    return ((record.get("hashes") or {}).get("models") or None) if isinstance(record, Mapping) else None


def same_models(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records came from the same models (both have hashes, and they are equal)."""
    ha, hb = model_hashes(a), model_hashes(b)
    return ha is not None and ha == hb


def load_kept(folder: Path, profile: str) -> list[tuple[Path, dict[str, Any]]]:
    """(path, record) of every kept draw in `folder` (reports/<profile>/draws/*.json), by file name,
    each checked; none without the folder. InputError when two hold the same models
    (`check_distinct`)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    kept = [(path, read_draw_report(path, profile)) for path in sorted(folder.glob("*.json"))]
    check_distinct(kept)
    return kept


def kept_name(path: Path, record: Mapping[str, Any]) -> str:
    """A kept draw's name: its `name` field, else its file name."""
    return str(record.get("name") or Path(path).stem)


def duplicate_of(record: Mapping[str, Any], kept: Sequence[tuple[Path, Mapping[str, Any]]],
                 ignore: Path | None = None) -> Path | None:
    """The file of a kept draw (other than `ignore`) that came from the same models as `record`."""
    return next((path for path, other in kept
                 if (ignore is None or Path(path).resolve() != Path(ignore).resolve()) and same_models(record, other)),
                None)


def check_distinct(kept: Sequence[tuple[Path, Mapping[str, Any]]]) -> None:
    """InputError naming both files when two kept records came from the same models: one set of
    models is one draw, whatever CPU re-made it, and counted twice it would weigh twice."""
    for i, (path, record) in enumerate(kept):
        for earlier, other in kept[:i]:
            if same_models(record, other):
                raise InputError(f"{path}: the same models (field 'hashes.models') as the kept draw "
                                 f"{kept_name(earlier, other)} ({earlier}): one set of models is one draw; remove "
                                 "one of the two files")


def _check_funnel(c: _Checker, funnel: Any) -> None:
    """The optional `funnel` field (draws made before it existed have none)."""
    if funnel is None:
        return
    c.need(funnel, "funnel", "obj")
    for system, rates in c.get(funnel, "rates", "obj", "funnel.").items():
        c.need(rates, f"funnel.rates.{system}", "obj")
        for key, value in rates.items():
            c.need(value, f"funnel.rates.{system}.{key}", "num?")
    for key, entry in c.get(funnel, "comparisons", "obj", "funnel.").items():
        c.need(entry, f"funnel.comparisons.{key}", "obj")
        for rate, gap in entry.items():
            c.need(gap, f"funnel.comparisons.{key}.{rate}", "obj?")
            for name in ("diff", "low", "high") if gap is not None else ():
                c.get(gap, name, "num", f"funnel.comparisons.{key}.{rate}.")


# --------------------------------------------------------------------------- naming and reading a draw


def cpu_tag(cpu: str) -> str:
    """A short, filename-safe tag of a CPU kind (pipeline.draws.identity.cpu_kind):
    'Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz, family 6 model 207 (AMX, AVX512-BF16)' -> 'xeon-f6m207'."""
    name = cpu.split(",")[0].lower()
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", name)
             if w not in {"intel", "amd", "r", "tm", "cpu", "processor", "genuine", "authentic", "core", "ghz"}]
    known = [w for w in words if w in {"xeon", "epyc", "ryzen", "threadripper", "opteron", "pentium", "celeron",
                                       "atom", "graviton", "neoverse", "ampere", "apple"}]
    family = (known or words or ["cpu"])[0]
    found = re.search(r"family (\d+) model (\d+)", cpu)
    return f"{family}-f{found.group(1)}m{found.group(2)}" if found else family


def safe_name(text: str) -> str:
    """`text` with every run of characters outside [A-Za-z0-9._-] made one '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "draw"


def default_name(report: dict[str, Any]) -> str:
    """<seed set>-<precision path>-<short cpu tag>, e.g. G-bf16-xeon-f6m207; '-t4' after the
    precision when the draw ran with 4 threads, not its profile's."""
    threads = str(report.get("threads") or "")
    other = f"-t{threads.split()[0]}" if other_threads(threads) else ""
    return safe_name(f"{report['seed_set']}-{report['precision']}{other}-{cpu_tag(report['cpu'])}")


def read_draw_report(path: Path, profile: str) -> dict[str, Any]:
    """A draw.json (the report stage's, or a kept one), checked for the fields a draw is named by."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no draw report; the report stage writes it (`make repro` in a checkout, "
                         "`python scripts/draw.py run ...` for a draw's workspace)") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}, line {err.lineno}: not valid JSON ({err.msg})") from None
    return check_record(report, Path(path), profile)
