"""Train the H200 proxy pair (issue 8) and measure its acceptance profiles; one GPU, one call.

    python3 experiments/proxy/train_h200.py [--out DIR] [--target-steps N] [--drafter-steps N]

Stages (seeded; recipe and recorded run in experiments/proxy/README.md):
1. corpus: gsm8k train (question, newline, worked answer, end-of-text) plus the Python standard
   library's own source (sorted paths, capped): local text only, nothing downloaded;
2. tokenizer: a byte-level BPE (``tokenizers``) trained on that corpus, specials first (EOS 0, MASK 3);
3. target: ``Qwen3_5ForCausalLM`` at proxy scale (hybrid: 12 Gated DeltaNet + 4 gated attention,
   hidden 768, ~0.13 B parameters) as a causal LM on the corpus (the Gated-DeltaNet gradient goes
   through the chunked torch form, ``kernels/gated_delta_rule/chunked.py``: fla-core 0.6 refuses
   its chunked backward on Hopper with Triton < 3.7.1); stored bf16 and reloaded;
4. drafter: ``DFlash2DraftModel`` (block 8, grouped convs + candidate selector) on the reloaded
   target's features and greedy continuations of gsm8k train questions and code openings,
   block-diffusion objective (``specpilot.training.drafter``); stored bf16;
5. profiles: the stock engine (bf16, CUDA graphs) on gsm8k / math500 / humaneval / mbpp test
   prompts, every output also checked token for token against AR; per-dataset accept-length
   histograms -> ``$OUT/proxy-h200-dflash2.parquet`` (the replay drafter's profile format).
Checkpoints land in ``--out`` (default ``$SPECPILOT_HOME/models/proxy-h200``), where the setting
``h200_c1_proxy-qwen38_dflash2`` finds them; they are ~0.3 GB, so they are rebuilt, not shipped.
"""

import argparse
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import torch

from specpilot.tiny import EOS_ID
from specpilot.tiny import MASK_ID
from specpilot.tiny import SPECIAL_TOKENS

VOCAB_SIZE = 8192
TOKENIZER_VOCAB = 8000
TARGET_CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
    "hidden_size": 768, "num_hidden_layers": 16, "num_attention_heads": 12,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 2048,
    "linear_num_key_heads": 8, "linear_num_value_heads": 16, "linear_key_head_dim": 64,
    "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "vocab_size": VOCAB_SIZE, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "max_position_embeddings": 4096, "eos_token_id": EOS_ID, "initializer_range": 0.02,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                        "mrope_section": [3, 3, 2], "mrope_interleaved": True},
}
DRAFTER_CONFIG = {
    "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "hidden_size": 768,
    "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 12,
    "num_key_value_heads": 4, "head_dim": 64, "vocab_size": VOCAB_SIZE, "rms_norm_eps": 1e-6,
    "rope_theta": 1e7, "max_position_embeddings": 4096, "block_size": 8,
    "num_target_layers": 16, "torch_dtype": "float32", "is_causal": False,
    "sliding_window": 128, "layer_types": ["sliding_attention", "sliding_attention"],
    "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": [1, 5, 9, 13],
                      "block_size": 8, "conv_kernel_size": 2, "conv_group_size": 16,
                      "selector_rank": 64, "selector_top_k": 8},
}
PROFILE_DATASETS = ("gsm8k", "math500", "humaneval", "mbpp")


def corpus(code_bytes: int) -> tuple[list[str], dict]:
    """gsm8k train documents + Python stdlib source files (sorted, up to ``code_bytes``)."""
    from specpilot.datasets import load_rows

    docs = [r["question"] + "\n" + r["answer"] for r in load_rows("gsm8k_train")]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code, total = [], 0
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if total + len(text) > code_bytes:
            continue  # too big for what is left: smaller files may still fit
        code.append(text)
        total += len(text)
    return docs + code, {"gsm8k_docs": len(docs), "code_files": len(code), "code_chars": total,
                         "stdlib": str(stdlib), "python": sys.version.split()[0]}


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer
    from tokenizers import decoders
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def token_stream(tokenizer, texts: list[str], seed: int) -> torch.Tensor:
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    ids = []
    for enc in tokenizer.encode_batch([texts[i] for i in order]):
        ids.extend(enc.ids)
        ids.append(EOS_ID)
    return torch.tensor(ids)


def drafter_prompts(tokenizer, code_texts: list[str], num_math: int, num_code: int, seed: int):
    """gsm8k train questions and openings (first 48 tokens) of stdlib functions, seeded order."""
    from specpilot.datasets import load_prompts

    g = torch.Generator().manual_seed(seed + 3)
    questions = load_prompts("gsm8k_train")
    math = [tokenizer.encode(questions[i]).ids
            for i in torch.randperm(len(questions), generator=g)[:num_math].tolist()]
    openings = []
    for text in code_texts:
        for chunk in text.split("\ndef ")[1:]:
            ids = tokenizer.encode("def " + chunk).ids
            if len(ids) >= 64:
                openings.append(ids[:48])
    picked = torch.randperm(len(openings), generator=g)[:num_code].tolist()
    return math + [openings[i] for i in picked]


def write_profiles(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def profiles(models, num_prompts: int, max_new_tokens: int, path: Path,
             datasets=PROFILE_DATASETS) -> tuple[list[dict], dict]:
    """Stock engine on each dataset's prompts (natural stop): accept lengths, and equality to AR.
    The Parquet at ``path`` is rewritten after every dataset, so a cut-off run keeps what it did."""
    from specpilot.datasets import load_prompts
    from specpilot.engines.engine import SamplingParams
    from specpilot.recipe import AR
    from specpilot.recipe import STOCK

    stock, ar = models.engine(STOCK), models.engine(AR)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    rows, summary = [], {}
    for dataset in datasets:
        started = time.perf_counter()
        lengths, equal, tokens = [], 0, 0
        for text in load_prompts(dataset, num_prompts):
            ids = models.tokenizer.encode(text).ids
            out = stock.generate(ids, params)
            lengths.extend(out.accept_lengths)
            equal += out.tokens == ar.generate(ids, params).tokens
            tokens += len(out.tokens)
        hist = {k: lengths.count(k) for k in range(1, stock.block_size + 1)}
        tau = sum(lengths) / len(lengths)
        summary[dataset] = {"tau": round(tau, 4), "steps": len(lengths), "tokens": tokens,
                            "prompts_equal_to_ar": equal, "num_prompts": num_prompts,
                            "histogram": hist, "wall_s": round(time.perf_counter() - started, 1)}
        rows += [{"pair": "proxy-h200-dflash2", "dataset": dataset,
                  "block_size": stock.block_size, "accept_length": k, "count": n,
                  "tau": tau, "num_prompts": num_prompts, "max_new_tokens": max_new_tokens}
                 for k, n in hist.items()]
        print(f"profile {dataset}: tau {tau:.3f}, {equal}/{num_prompts} prompts equal to AR "
              f"({summary[dataset]['wall_s']} s)", flush=True)
        write_profiles(rows, path)
    return rows, summary


def train(args, record: dict, mark, target_config: dict, drafter_config: dict, batch) -> float:
    """Stages 1-4: corpus, tokenizer, target, continuations, drafter; checkpoints in ``args.out``."""
    from specpilot.engines.models import load_model
    from specpilot.training import DrafterTraining
    from specpilot.training import TargetTraining
    from specpilot.training import greedy_continuations
    from specpilot.training import save_checkpoint
    from specpilot.training import train_drafter
    from specpilot.training import train_target

    t = time.perf_counter()
    texts, record["corpus"] = corpus(args.code_bytes)
    tokenizer = train_tokenizer(texts)
    stream = token_stream(tokenizer, texts, args.seed)
    record["corpus"]["tokens"] = len(stream)
    t = mark("corpus_and_tokenizer_s", t)
    recipe = TargetTraining(seed=args.seed, num_steps=args.target_steps, batch_size=batch[0],
                            seq_len=batch[1], lr=1e-3, warmup_steps=100, weight_decay=0.05,
                            stop_step=args.target_stop_step)
    target, record["target"] = train_target(tokenizer, recipe, config=target_config,
                                            stream=stream, device=args.device,
                                            budget_s=args.target_budget_s,
                                            log=lambda m: print(m, flush=True))
    record["target"]["num_parameters"] = sum(p.numel() for p in target.parameters())
    target_dir = save_checkpoint(target, target_config, args.out / "target",
                                 extra_files={"tokenizer.json": tokenizer.to_str().encode()})
    del target
    target = load_model(target_dir, args.device, torch.float32)  # as shipped: bf16-rounded weights
    t = mark("target_s", t)
    code_texts = texts[record["corpus"]["gsm8k_docs"]:]
    prompts = drafter_prompts(tokenizer, code_texts, args.num_math, args.num_code, args.seed)
    layers = tuple(drafter_config["dflash_config"]["target_layer_ids"])
    continuations = greedy_continuations(target, prompts, args.num_new_tokens, layers,
                                         batch_size=256)
    t = mark("continuations_s", t)
    drafter, record["drafter"] = train_drafter(
        target, continuations, DrafterTraining(seed=args.seed, num_steps=args.drafter_steps,
                                               sequences_per_step=batch[2],
                                               anchors_per_sequence=32,
                                               lr=1e-3, warmup_steps=100,
                                               stop_step=args.drafter_stop_step),
        config=drafter_config, budget_s=args.drafter_budget_s, log=lambda m: print(m, flush=True))
    record["drafter"]["num_parameters"] = sum(p.numel() for p in drafter.parameters())
    save_checkpoint(drafter, drafter_config, args.out / "dflash2")
    del drafter, continuations, target
    if args.device == "cuda":
        torch.cuda.empty_cache()
    t = mark("drafter_s", t)
    return t


def main(argv=None) -> int:
    home = Path(os.environ.get("SPECPILOT_HOME", Path.home() / ".cache" / "specpilot"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=home / "models" / "proxy-h200")
    parser.add_argument("--results", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--code-bytes", type=int, default=8_000_000)
    parser.add_argument("--target-steps", type=int, default=3000)
    parser.add_argument("--target-budget-s", type=float, default=None)
    parser.add_argument("--target-stop-step", type=int, default=None,
                        help="stop there, the schedule still spanning --target-steps (reproduces a "
                             "budgeted run from its steps_done)")
    parser.add_argument("--drafter-steps", type=int, default=3000)
    parser.add_argument("--drafter-stop-step", type=int, default=None)
    parser.add_argument("--drafter-budget-s", type=float, default=None)
    parser.add_argument("--num-math", type=int, default=1536)
    parser.add_argument("--num-code", type=int, default=512)
    parser.add_argument("--num-new-tokens", type=int, default=96)
    parser.add_argument("--profile-prompts", type=int, default=16)
    parser.add_argument("--profile-tokens", type=int, default=192)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--setting", default="h200_c1_proxy-qwen38_dflash2",
                        help="the setting whose checkpoints are --out (profiles load it)")
    parser.add_argument("--reuse", action="store_true",
                        help="skip training when --out already holds both checkpoints (a second "
                             "call on the same machine measures the profiles)")
    parser.add_argument("--profile-datasets", default=",".join(PROFILE_DATASETS))
    parser.add_argument("--smoke", action="store_true",
                        help="shrink the models and batches (a CPU check of the whole script)")
    args = parser.parse_args(argv)
    target_config, drafter_config, batch = TARGET_CONFIG, DRAFTER_CONFIG, (32, 128, 32)
    if args.smoke:
        target_config = {**TARGET_CONFIG, "hidden_size": 64, "num_hidden_layers": 8,
                         "intermediate_size": 128, "num_attention_heads": 2,
                         "linear_num_key_heads": 2, "linear_num_value_heads": 4}
        drafter_config = {**DRAFTER_CONFIG, "hidden_size": 64, "intermediate_size": 128,
                          "num_attention_heads": 2, "num_key_value_heads": 1,
                          "num_target_layers": 8, "dflash_config": {
                              **DRAFTER_CONFIG["dflash_config"], "target_layer_ids": [1, 3, 5, 7]}}
        batch = (4, 64, 4)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    args.results.mkdir(parents=True, exist_ok=True)
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "timings": {}}
    started = time.perf_counter()

    def mark(name, since):
        record["timings"][name] = round(time.perf_counter() - since, 1)
        (args.results / "proxy_training.json").write_text(json.dumps(record, indent=1))
        return time.perf_counter()

    t = time.perf_counter()
    if args.reuse and all((args.out / d / "config.json").exists() for d in ("target", "dflash2")):
        record["reused"] = str(args.out)
        print(f"reusing the checkpoints in {args.out}", flush=True)
    else:
        t = train(args, record, mark, target_config, drafter_config, batch)
    from specpilot.build import load_models
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    from specpilot.build import resolve

    measured_dir = resolve(setting.target, setting, "target")
    if Path(measured_dir).resolve() != (args.out / "target").resolve():
        raise SystemExit(f"setting {args.setting} reads {measured_dir}, not --out {args.out}: "
                         "set SPECPILOT_HOME (or --out) so that they agree")
    if setting.engine.device != args.device:  # --smoke on a CPU box
        import dataclasses

        setting = dataclasses.replace(setting, engine=dataclasses.replace(
            setting.engine, device=args.device, dtype="float32"))
    models = load_models(setting)
    _, record["profiles"] = profiles(models, args.profile_prompts, args.profile_tokens,
                                     args.results / "proxy-h200-dflash2.parquet",
                                     args.profile_datasets.split(","))
    mark("profiles_s", t)
    record["timings"]["total_s"] = round(time.perf_counter() - started, 1)
    from specpilot.fingerprint import current

    record["fingerprint"] = current(args.device).to_dict()
    (args.results / "proxy_training.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({"timings": record["timings"], "profiles": {
        d: v["tau"] for d, v in record["profiles"].items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
