"""Stage `corpus`: the passage corpus in wiki-18 form (id, title, text, contents): the synthetic
world's passages, the raw corpus files, or a prebuilt index's own jsonl; one MLflow run."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.io import write_parquet
from pipeline.paths import Paths
from pipeline.stage_io.sources import world
from pipeline.tracking.runs import stage_run


def run_corpus(params: Params, root: Path) -> dict:
    paths = Paths(root)
    if params.index.kind == "prebuilt":
        return _prebuilt_corpus(params, root)
    with stage_run("corpus", params.profile, {"source": params.data.source}, root=root) as mlf:
        if params.data.source == "synthetic":
            passages = world(params).passages
        else:
            from pipeline.data.loaders import load_raw_dir

            _, passages = load_raw_dir(root / params.data.raw_dir)
        passages = passages[["id", "title", "text", "contents"]].reset_index(drop=True)
        if passages.empty:
            raise InputError(f"{root / params.data.raw_dir / 'corpus'}: no passages; expected corpus files "
                             f"(*.jsonl, *.json, *.parquet) holding at least one passage")
        if passages["id"].duplicated().any():
            dup = passages.loc[passages["id"].duplicated(), "id"].iloc[0]
            raise InputError(f"corpus: passage id {dup!r} repeats; expected unique ids")
        write_parquet(paths.corpus, passages)
        mlf.log_metric("passages", len(passages))
    return {"passages": len(passages)}


def _prebuilt_corpus(params: Params, root: Path) -> dict:
    """The corpus of a prebuilt index is its own jsonl (row i = vector i), converted as it
    streams; the raw corpus folder is not read."""
    from pipeline.data.loaders import convert_jsonl_corpus

    source = root / str(params.index.corpus)
    count = convert_jsonl_corpus(source, Paths(root).corpus)
    if count == 0:
        Paths(root).corpus.unlink()
        raise InputError(f"{source}: no passages; expected the jsonl corpus of index.faiss_index")
    with stage_run("corpus", params.profile, {"source": "prebuilt", "corpus": params.index.corpus}, root=root) as mlf:
        mlf.log_metric("passages", count)
    return {"passages": count}
