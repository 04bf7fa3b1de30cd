"""The target's greedy continuations of prompts, with its hidden features at the drafter's layers.

What a block drafter must learn to predict is exactly this: the target's greedy next tokens, given
the target's own features of the committed context. Prompts are prefilled one at a time into their
row of a batched cache (rows never mix state), then decoded together, one token per forward, each
row at its own positions.
"""

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Continuation:
    """One prompt and the target's greedy continuation.

    ``token_ids`` [N] = prompt + continuation; ``features`` [N - 1, len(layers) * hidden] are the
    target's outputs of the capture layers (HF ``hidden_states[i + 1]``) for every token but the
    last, in the dtype they were stored in; ``num_prompt_tokens`` marks where the continuation begins.
    """

    token_ids: torch.Tensor
    features: torch.Tensor
    num_prompt_tokens: int


@torch.inference_mode()
def greedy_continuations(target, prompts: list[list[int]], num_new_tokens: int,
                         capture: tuple[int, ...], batch_size: int = 64,
                         store_dtype: torch.dtype = torch.bfloat16) -> list[Continuation]:
    """``num_new_tokens`` greedy tokens after each prompt (end-of-text ignored), with features."""
    out = []
    device = target.lm_head.weight.device
    for first in range(0, len(prompts), batch_size):
        chunk = prompts[first:first + batch_size]
        lengths = [len(p) for p in chunk]
        cache = target.new_cache(len(chunk), max(lengths) + num_new_tokens)
        features, next_ids = [], []
        for row, prompt in enumerate(chunk):
            ids = torch.tensor([prompt], device=device)
            result = target.prefill(ids, torch.arange(len(prompt), device=device)[None],
                                    cache.rows(slice(row, row + 1)), capture=capture)
            features.append([result.aux[0].to(store_dtype)])
            next_ids.append(result.logits[0, -1].argmax())
        current = torch.stack(next_ids)[:, None]
        generated = [current]
        positions = torch.tensor(lengths, device=device)[:, None]
        for _ in range(num_new_tokens - 1):
            result = target(current, positions, cache, capture=capture)
            current = result.logits[:, -1].argmax(dim=-1, keepdim=True)
            positions = positions + 1
            generated.append(current)
            for row in range(len(chunk)):
                features[row].append(result.aux[row].to(store_dtype))
        generated = torch.cat(generated, dim=1).tolist()  # one device->host read per chunk
        for row, prompt in enumerate(chunk):
            out.append(Continuation(torch.tensor(prompt + generated[row], device=device),
                                    torch.cat(features[row]), len(prompt)))
    return out
