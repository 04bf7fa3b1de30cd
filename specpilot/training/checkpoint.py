"""Save a trained engine model as an HF-format checkpoint directory, weights in a 16-bit dtype."""

import json
from pathlib import Path

import torch

STORE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def save_checkpoint(model: torch.nn.Module, config: dict, out_dir: str | Path,
                    store_dtype: str = "bfloat16", extra_files: dict[str, bytes] | None = None
                    ) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (checkpoint names, ``store_dtype``) to ``out_dir``.

    Merged linears are split back into their checkpoint shards (``q_proj``/``k_proj``/...), so the
    directory loads with :func:`specpilot.engines.models.load_model` (in any dtype) and, for targets,
    with transformers. ``extra_files``: more files to write next to them (e.g. ``tokenizer.json``).
    """
    from safetensors.torch import save_file

    from specpilot.engines.models.loader import checkpoint_state_dict

    if store_dtype not in STORE_DTYPES:
        raise ValueError(f"store_dtype must be one of {sorted(STORE_DTYPES)}, got {store_dtype!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = STORE_DTYPES[store_dtype]
    tensors = {name: t.detach().to("cpu", dtype).contiguous()
               for name, t in checkpoint_state_dict(model).items()}
    (out / "config.json").write_text(json.dumps({**config, "torch_dtype": store_dtype}, indent=2)
                                     + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    for name, data in (extra_files or {}).items():
        (out / name).write_bytes(data)
    return out
