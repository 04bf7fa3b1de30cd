"""Tiny checkpoints of the real architectures for the CPU embedded default and the tests.

Generated deterministically on first use into ``$SPECPILOT_HOME/models`` (default
``~/.cache/specpilot``): the target with transformers' own config class and ``save_pretrained`` (so the
real loading path is exercised), the drafters as HF-format directories (config.json + safetensors)
written from our own modules. The tokenizer is a byte-level BPE trained with ``tokenizers`` on the
bundled gsm8k training questions and shipped as ``specpilot/data/tiny_tokenizer.json``
(``python -m specpilot.tiny tokenizer`` rebuilds it).

The *trained* tiny pair (``BUNDLED``: a small Qwen3.5 hybrid target and a DFlash2 drafter trained on
the bundled gsm8k text, bf16) ships in ``specpilot/data/tiny_trained`` instead of being generated.
"""

import json
import os
import sys
from pathlib import Path

import torch

from specpilot.datasets import DATA_DIR
from specpilot.datasets import load_prompts

TOKENIZER_FILE = DATA_DIR / "tiny_tokenizer.json"
# The trained tiny pair shipped with the package (``bundled:<name>`` in a setting), written by
# experiments/proxy/train_tiny.py; training.json next to them records how.
TRAINED_DIR = DATA_DIR / "tiny_trained"
BUNDLED = {"tiny-trained-qwen3_5": TRAINED_DIR / "qwen3_5",
           "tiny-trained-dflash2": TRAINED_DIR / "dflash2"}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]
VOCAB_SIZE = 4096  # model vocabulary (the tokenizer uses 4000 of it, specials first)
EOS_ID, MASK_ID = 0, 3

TARGET = dict(
    hidden_size=256, num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=1, head_dim=64,
    intermediate_size=864, linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=32,
    linear_value_head_dim=32, linear_conv_kernel_dim=4, vocab_size=VOCAB_SIZE,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    max_position_embeddings=4096, eos_token_id=EOS_ID, initializer_range=0.05,
)


MUSE_TARGET = dict(
    hidden_size=256, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=1,
    head_dim=32, intermediate_size=768, vocab_size=VOCAB_SIZE, sliding_window=16,
    max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    output_multiplier=1.0, qk_scale_factor=3.87, final_logit_softcapping=20.0, eos_token_id=EOS_ID,
    bos_token_id=1, initializer_range=0.05,
)
MUSE_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
MUSE_ASSISTANT = dict(
    hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, sliding_window=16, block_size=16, mask_token_id=MASK_ID,
    pad_token_id=2, bos_token_id=1, eos_token_id=EOS_ID, target_layer_ids=[1, 3, 5],
    rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, max_position_embeddings=4096,
)


def _drafter_config(architecture: str, block_size: int, extra: dict) -> dict:
    layers = 2
    return {
        "architectures": [architecture], "model_type": "qwen3", "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": VOCAB_SIZE, "rms_norm_eps": 1e-6,
        "rope_theta": 1e7, "max_position_embeddings": 4096, "block_size": block_size,
        "num_target_layers": 8, "torch_dtype": "float32",
        "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": [1, 3, 5],
                          "block_size": block_size, **extra},
    }


def _dspark_config(base: dict, head: str) -> dict:
    """A tiny DSpark drafter: ``base``'s backbone + Markov head + confidence head, gamma = 7."""
    return {**base, "architectures": ["DSparkDraftModel"], "vocab_size": VOCAB_SIZE,
            "dspark_config": {"block_size": 7, "markov_rank": 32, "markov_head_type": head,
                              "enable_confidence_head": True, "confidence_head_with_markov": True,
                              "mask_token_id": MASK_ID, "target_layer_ids": [1, 3, 5]}}


DRAFTERS = {
    # DFlash v1: block 16, bidirectional full-attention layers.
    "tiny-dflash": _drafter_config("DFlashDraftModel", 16, {}),
    # DFlash2: block 8, all sliding-window layers (non-causal), grouped convs + selector.
    "tiny-dflash2": {**_drafter_config("DFlash2DraftModel", 8, {
        "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32, "selector_top_k": 8}),
        "is_causal": False, "sliding_window": 64,
        "layer_types": ["sliding_attention", "sliding_attention"]},
}
DRAFTERS["tiny-dspark"] = _dspark_config(DRAFTERS["tiny-dflash"], "vanilla")
# Muse DSpark: the assistant's backbone (all sliding, bidirectional) + a gated Markov head
DRAFTERS["tiny-muse-dspark"] = {
    **_dspark_config(DRAFTERS["tiny-dflash"], "gated"), "is_causal": False, "sliding_window": 16,
    "layer_types": ["sliding_attention", "sliding_attention"], "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0}


def home() -> Path:
    return Path(os.environ.get("SPECPILOT_HOME", Path.home() / ".cache" / "specpilot"))


def build_tokenizer(path: Path = TOKENIZER_FILE) -> None:
    """Train the byte-level BPE on the bundled gsm8k training questions."""
    from tokenizers import Tokenizer
    from tokenizers import decoders
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(load_prompts("gsm8k_train"), trainer)
    tokenizer.save(str(path))


def _version_tag(*configs) -> str:
    """Short hash of the configs and the transformers version: a changed recipe never reuses a
    stale generated checkpoint."""
    import transformers

    from specpilot.fingerprint import stable_hash

    return stable_hash([list(configs), transformers.__version__, TOKENIZER_FILE.stat().st_size])[:8]


def _write_atomically(target_dir: Path, writer) -> Path:
    if (target_dir / "config.json").is_file():
        return target_dir
    tmp = target_dir.with_name(target_dir.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    writer(tmp)
    try:
        tmp.rename(target_dir)
    except OSError:  # another process won the race; theirs is identical
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target_dir


def tiny_target(seed: int = 0) -> Path:
    """The tiny Qwen3.5 hybrid target (8 layers: 6 Gated DeltaNet + 2 gated attention)."""

    def write(out: Path):
        from transformers import Qwen3_5ForCausalLM as HFModel
        from transformers import Qwen3_5TextConfig

        torch.manual_seed(seed)
        model = HFModel(Qwen3_5TextConfig(**TARGET))
        model.save_pretrained(out)
        (out / "tokenizer.json").write_bytes(TOKENIZER_FILE.read_bytes())

    return _write_atomically(home() / "models" / f"tiny-qwen3_5-s{seed}-{_version_tag(TARGET)}",
                             write)


def tiny_muse_target(seed: int = 0) -> Path:
    """A tiny Muse-Glimmer VLM checkpoint (8 text layers: 6 sliding-window, 2 global NoPE)."""

    def write(out: Path):
        from transformers import MuseGlimmerConfig
        from transformers import MuseGlimmerForConditionalGeneration as HFModel

        torch.manual_seed(seed)
        config = MuseGlimmerConfig(text_config=MUSE_TARGET, vision_config=MUSE_VISION,
                                   out_hidden_size=128, projector_hidden_size=64)
        HFModel(config).save_pretrained(out)
        (out / "tokenizer.json").write_bytes(TOKENIZER_FILE.read_bytes())

    tag = _version_tag(MUSE_TARGET, MUSE_VISION)
    return _write_atomically(home() / "models" / f"tiny-muse-s{seed}-{tag}", write)


def tiny_muse_assistant(seed: int = 0) -> Path:
    """A tiny Muse-Glimmer assistant (the official DFlash drafter architecture), via transformers."""

    def write(out: Path):
        from transformers import MuseGlimmerAssistantConfig
        from transformers import MuseGlimmerAssistantModel as HFModel

        torch.manual_seed(seed + 1)
        HFModel(MuseGlimmerAssistantConfig(**MUSE_ASSISTANT)).save_pretrained(out)

    tag = _version_tag(MUSE_ASSISTANT)
    return _write_atomically(home() / "models" / f"tiny-muse-assistant-s{seed}-{tag}", write)


GENERATED = {
    "tiny-qwen3_5": tiny_target,
    "tiny-muse": tiny_muse_target,
    "tiny-muse-assistant": tiny_muse_assistant,
}


def tiny_drafter(name: str, seed: int = 0) -> Path:
    """A tiny random drafter ("tiny-dflash" or "tiny-dflash2") for the tiny target."""
    from safetensors.torch import save_file

    from specpilot.engines.models import random_model
    from specpilot.engines.models.loader import checkpoint_state_dict

    config = DRAFTERS[name]

    def write(out: Path):
        model = random_model(config, seed=seed + 1)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        save_file(checkpoint_state_dict(model), str(out / "model.safetensors"))

    return _write_atomically(home() / "models" / f"{name}-s{seed}-{_version_tag(config)}", write)


if __name__ == "__main__":
    if sys.argv[1:] == ["tokenizer"]:
        build_tokenizer()
        print(f"wrote {TOKENIZER_FILE}")
    else:
        sys.exit("usage: python -m specpilot.tiny tokenizer")
