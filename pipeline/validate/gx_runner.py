"""Run Great Expectations suites over in-memory tables and build their Data Docs.

Each `TableCheck` becomes one dataframe asset, one suite and one Validation Definition
in a fresh ephemeral context; the Data Docs site is written to `docs_dir` whole.

The site is byte-reproducible, so that DVC can cache it and a checkout elsewhere reuses it:
every validation runs under one fixed run id (`DOCS_RUN_ID`: the run name says what it is,
the run time is a constant, not the clock); the clock times GE still writes into pages (the
batch's load time, the build time on each logo URL) are replaced by that constant, and the
random ids of a page's collapsible blocks are numbered in order. The site is then made to render
offline (pipeline.validate.offline_docs): no CDN, an index that lists every validation with its
status, pass/fail marks that need no icon font, and a note on every page on why the run time
is a constant.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import great_expectations as gx
import pandas as pd
from great_expectations.core.expectation_validation_result import (
    ExpectationSuiteValidationResult,
    ExpectationValidationResult,
)
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.expectations import Expectation

from pipeline.io import atomic_dir
from pipeline.validate.offline_docs import Validation, make_offline

DOCS_SITE = "pipeline"
MAX_OFFENDERS = 5
DOCS_RUN_ID = RunIdentifier(run_name="pipeline-validation",
                            run_time=datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC))
_CLOCK_TIME = re.compile(r"\d{8}T\d{6}\.\d{6}Z")  # GE's timestamp format
_BLOCK_ID = re.compile(r"(collapse-body-)([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


@dataclass
class TableCheck:
    """One table and the expectations it must meet.

    `id_columns` name each offending row in failure messages; every expectation carries
    `meta={"check": "<plain description>"}`.
    """

    name: str
    frame: pd.DataFrame
    id_columns: list[str]
    expectations: list[Expectation]


@dataclass
class ValidationOutcome:
    """success, one human-readable message per failed expectation, a JSON-able summary."""

    success: bool
    failures: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)


def check(expectation: Expectation, description: str) -> Expectation:
    """Attach the plain-words description that failure messages and Data Docs show."""
    expectation.meta = {**(expectation.meta or {}), "check": description}
    return expectation


def run_table_checks(suite_name: str, tables: list[TableCheck], docs_dir: Path) -> ValidationOutcome:
    """Validate every table with GE and write the Data Docs site to `docs_dir`."""
    index_path = str(Path(docs_dir) / "index.html")
    docs_dir = Path(docs_dir).resolve()
    failures: list[str] = []
    summary: dict[str, Any] = {}
    with atomic_dir(docs_dir) as site_dir:
        context = _ephemeral_context(site_dir)
        source = context.data_sources.add_pandas(suite_name)
        for table in tables:
            result = _validate_table(context, source, f"{suite_name}.{table.name}", table)
            summary[table.name] = _table_summary(result, table.id_columns)
            failures += [
                _failure_message(table.name, r, table.id_columns) for r in result.results if not r.success
            ]
        context.build_data_docs(site_names=[DOCS_SITE])
        if not (site_dir / "index.html").is_file():
            raise RuntimeError(f"Great Expectations wrote no Data Docs index under {site_dir}")
        _strip_clock_and_random_ids(site_dir)
        make_offline(site_dir, suite_name, [
            Validation(name, f"{suite_name}.{name}", table["success"],
                       sum(e["success"] for e in table["expectations"]), len(table["expectations"]))
            for name, table in summary.items()])
    return ValidationOutcome(
        success=not failures,
        failures=failures,
        results={
            "suite": suite_name,
            "success": not failures,
            "data_docs": index_path,
            "tables": summary,
        },
    )


def _strip_clock_and_random_ids(site_dir: Path) -> None:
    fixed_time = DOCS_RUN_ID.to_tuple()[1]
    for page in site_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        block_numbers: dict[str, int] = {}
        stripped = _CLOCK_TIME.sub(fixed_time, text)
        stripped = _BLOCK_ID.sub(
            lambda m, block_numbers=block_numbers: f"{m[1]}{block_numbers.setdefault(m[2], len(block_numbers))}",
            stripped)
        if stripped != text:
            page.write_text(stripped, encoding="utf-8")


def _ephemeral_context(site_dir: Path) -> Any:
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    context.add_data_docs_site(
        DOCS_SITE,
        {
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(site_dir),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    return context


def _validate_table(
    context: Any, source: Any, suite_name: str, table: TableCheck
) -> ExpectationSuiteValidationResult:
    asset = source.add_dataframe_asset(table.name)
    batch = asset.add_batch_definition_whole_dataframe(f"{table.name}_all")
    suite = context.suites.add(gx.ExpectationSuite(name=suite_name))
    for expectation in table.expectations:
        suite.add_expectation(expectation)
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
    )
    # COMPLETE + index columns: unexpected rows come back named by their id columns.
    return definition.run(
        batch_parameters={"dataframe": table.frame},
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": table.id_columns},
        run_id=DOCS_RUN_ID,
    )


def _description(result: ExpectationValidationResult) -> str:
    config = result.expectation_config
    meta = config.meta or {}
    return f"{meta.get('check', config.type)} [{config.type}]"


def _offenders(result: ExpectationValidationResult, id_columns: list[str]) -> list[str]:
    """Distinct renderings of the unexpected rows, by their id columns."""
    rows = (result.result or {}).get("unexpected_index_list") or []
    seen: list[str] = []
    for row in rows:
        text = (
            ", ".join(f"{c}={_plain(row[c])}" for c in id_columns if c in row)
            if isinstance(row, dict)
            else f"row {row}"
        )
        if text not in seen:
            seen.append(text)
    return seen


def _failure_message(table: str, result: ExpectationValidationResult, id_columns: list[str]) -> str:
    head = f"{table}: {_description(result)} failed"
    error = _exception_message(result)
    if error:
        return f"{head}: {error}"
    offenders = _offenders(result, id_columns)
    count = (result.result or {}).get("unexpected_count", len(offenders))
    shown = "; ".join(offenders[:MAX_OFFENDERS])
    more = f" (+{len(offenders) - MAX_OFFENDERS} more)" if len(offenders) > MAX_OFFENDERS else ""
    return f"{head} on {count} row(s): {shown}{more}"


def _exception_message(result: ExpectationValidationResult) -> str:
    """GE reports an expectation that raised (e.g. a missing column) either flat or per metric."""
    info = result.exception_info or {}
    entries = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    return "; ".join(str(e.get("exception_message")) for e in entries if e.get("raised_exception"))


def _table_summary(result: ExpectationSuiteValidationResult, id_columns: list[str]) -> dict[str, Any]:
    return {
        "success": bool(result.success),
        "expectations": [
            {
                "expectation": r.expectation_config.type,
                "check": (r.expectation_config.meta or {}).get("check", ""),
                "column": _plain(r.expectation_config.kwargs.get("column", "")),
                "success": bool(r.success),
                "unexpected_count": int((r.result or {}).get("unexpected_count", 0) or 0),
                "offenders": _offenders(r, id_columns)[:20],
            }
            for r in result.results
        ],
    }


def _plain(value: Any) -> Any:
    """numpy scalars to Python ones, for messages and JSON."""
    return value.item() if hasattr(value, "item") else value
