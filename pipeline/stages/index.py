"""Stage `index`: E5 vectors of the corpus in a faiss index (or the checked pointers to a prebuilt
one) under data/index/; one MLflow run."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.config import Params
from pipeline.paths import Paths
from pipeline.stage_io.inputs import read_corpus
from pipeline.tracking.runs import stage_run


def run_index(params: Params, root: Path) -> dict:
    from pipeline.retrieval.encoders import concrete_encoder, encoder_ref, make_encoder

    paths = Paths(root)
    ip = params.index
    concrete = concrete_encoder(ip.encoder)  # "auto" names the one this CPU runs fast
    with stage_run("index", params.profile, {**ip.model_dump(), "encoder_used": concrete}, root=root) as mlf:
        encoder = make_encoder(concrete, device=ip.device, root=root)
        name = encoder_ref(concrete, root)  # relative to the root: any checkout opens the index
        start = time.perf_counter()
        if ip.kind == "prebuilt":
            from pipeline.retrieval.index import write_prebuilt_meta

            info = write_prebuilt_meta(paths.index, str(ip.faiss_index), str(ip.corpus), name, root,
                                       encoder_dim=encoder.dim, gpu_fp16=ip.gpu_fp16)
            count = info["count"]
        else:
            from pipeline.retrieval.index import build_index

            passages = read_corpus(root)
            info = build_index(passages, encoder, paths.index, batch_size=ip.batch_size, spec=ip.spec(),
                               seed=ip.train_seed, encoder_name=name)
            count = len(passages)
        seconds = time.perf_counter() - start
        mlf.log_metrics({"passages": count, "seconds": seconds,
                         "passages_per_second": count / max(seconds, 1e-9)})
    return dict(info)

