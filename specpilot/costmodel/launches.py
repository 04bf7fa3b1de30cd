"""Kernels per decode phase, counted by running the engine's own step functions, and the per-kernel
fixed cost they pay on a GPU.

A decode phase made of many small kernels (draft, commit) costs mostly a fixed time per kernel: the
launch, plus the ramp and tail of a kernel that must wait for the previous one (a CUDA graph removes
the host from the loop, not this). ``kernel_counts`` gives the number of kernels each phase runs for
a model pair and recipe; ``measure_launch_us`` measures the fixed cost on the GPU at hand.

Counting: the configs are shrunk (every structural field kept: layer count and types, head counts,
drafter layers, target layer ids, block; hidden, intermediate, vocab and head dims made tiny), the
models built on the CPU, and one request decoded by :class:`~specpilot.engines.engine.Engine` with a
:class:`torch.utils._python_dispatch.TorchDispatchMode` that sees every aten op and attributes it to
the phase the engine marks (the same marks the GPU phase timer records). An op is one kernel when it
writes device memory: a mutating op (``copy_``, ``masked_fill_``, ``index_put_``) or an op with an
output that aliases no input. Views, no-op casts and allocations (``empty*``) are free; composite ops
are decomposed first, as they run on the device. What the CPU run does differently from the GPU
engine is simulated, from the code the GPU runs:

- ``fused_elementwise``: each ``torch.compile``d element-wise function is one fused kernel, and so
  is each of the engine's own decode kernels: the Gated-DeltaNet short conv and gates
  (:mod:`specpilot.kernels.short_conv`), the residual add + RMSNorm
  (:mod:`specpilot.kernels.add_rms_norm`), the KV-cache write (:mod:`specpilot.kernels.kv_write`),
  the Gated-DeltaNet output norm (:mod:`specpilot.kernels.gated_rms_norm`), the q/k norm +
  rotary (:mod:`specpilot.kernels.qk_norm_rope`) and, at decode and verify widths, the masked
  attention with its output gate (:mod:`specpilot.kernels.slot_attention`, two kernels);
- Gated DeltaNet: :func:`specpilot.kernels.gated_delta_rule.dispatch._fla` runs as on CUDA (its
  ``.contiguous()`` copies, its per-token loop for snapshots, its ``cat``/``stack``), each fla-core
  ``fused_recurrent_gated_delta_rule`` call counting one kernel: fla's ``fused_recurrent.py``
  allocates its outputs and launches one Triton kernel (``fused_recurrent_gated_delta_rule_fwd_kernel``,
  l2-norm in kernel); read from its source, fla-core being absent from CPU boxes. A commit that
  stores the final state in place (``dispatch._fused_recurrent_into``) is that one kernel without
  the state copy. Decode widths (<= 64 rows) never reach the chunked
  kernel;
- ``cuda_graphs``: every phase copies its two step inputs into the captured tensors
  (``CapturedStep.__call__``), ``GRAPH_INPUT_COPIES`` more kernels, and a captured AR step picks
  and feeds back its own token (``AR_GRAPH_SELF_FEED``); ``torch.tensor`` uploads inside a phase
  (the commit's two scalars) are one copy each.

Approximations, kept explicit: every GEMM is one kernel (cuBLAS may add a split-K reduction), the
attention is its front end's mask conversion plus one fused kernel (as PyTorch's CPU path runs it),
and each remaining aten op is one kernel on the GPU too (``topk`` over the vocabulary may take more).
"""

import collections
import contextlib
import copy
import statistics
import sys
import types
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specpilot.fingerprint import stable_hash

PHASES = ("ar", "verify", "draft", "commit")
GRAPH_INPUT_COPIES = 2  # every captured step function takes two tensors (engine.py `_graphs`)
# a captured AR step also picks its token and feeds it back (engine.py `_decode_next_fn`): the
# argmax, the token's copy into the step's input and the position's increment
AR_GRAPH_SELF_FEED = 3
FLA_FUSED_RECURRENT_KERNELS = 1

SHRUNK_SIZES = {"hidden_size": 64, "intermediate_size": 64, "vocab_size": 256, "head_dim": 16,
           "linear_key_head_dim": 8, "linear_value_head_dim": 8, "selector_rank": 8,
           "markov_rank": 8, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}
_ALLOCATIONS = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                "aten::new_empty_strided"}
_CACHE: dict[str, dict[str, int]] = {}


def shrink_config(config: dict, sizes: dict | None = None) -> dict:
    """``config`` with tiny dims (``sizes``, default ``SHRUNK_SIZES``) and every structural field kept
    (nested text/drafter configs too); token ids are clamped into the shrunk vocabulary."""
    out = copy.deepcopy(config)
    sizes = sizes or SHRUNK_SIZES

    def walk(node: dict) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif key in sizes and isinstance(value, int):
                node[key] = min(value, sizes[key])
            elif key.endswith("token_id") and isinstance(value, int):
                node[key] = value % sizes["vocab_size"]
            elif key.endswith("token_id") and isinstance(value, list):
                node[key] = [v % sizes["vocab_size"] for v in value]

    walk(out)
    return out


class KernelCounter(TorchDispatchMode):
    """Counts device kernels per label (the phase the engine is in); ops outside a label are free."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.label: str | None = None
        self._opaque = 0

    @contextlib.contextmanager
    def opaque(self, num_kernels: int):
        """A region that runs as ``num_kernels`` device kernels whatever it does here."""
        if self.label is not None and not self._opaque:
            self.counts[self.label] += num_kernels
        self._opaque += 1
        try:
            yield
        finally:
            self._opaque -= 1

    def __torch_dispatch__(self, func, arg_types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.label is None or self._opaque:
            return func(*args, **kwargs)
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if _writes_memory(func, args, kwargs, out):
            self.counts[self.label] += 1
        return out


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _writes_memory(func, args, kwargs, out) -> bool:
    name = func._schema.name
    if name in _ALLOCATIONS or torch.Tag.inplace_view in func.tags:
        return False
    if name == "aten::lift_fresh":  # torch.tensor(data, device=...): one host-to-device copy
        return True
    if func._schema.is_mutable:
        return True
    inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs)) if t.numel()}
    return any(t.numel() and t.untyped_storage().data_ptr() not in inputs for t in _tensors(out))


class _Labels:
    """The engine's phase timer interface (``phase``/``step``), labelling the counter instead."""

    def __init__(self, counter: KernelCounter):
        self.counter, self.steps = counter, []

    @contextlib.contextmanager
    def step(self):
        self.counter.counts = collections.Counter()
        yield
        self.steps.append(dict(self.counter.counts))

    @contextlib.contextmanager
    def phase(self, name: str):
        self.counter.label = name
        try:
            yield
        finally:
            self.counter.label = None


@contextlib.contextmanager
def _gpu_paths(counter: KernelCounter, fused: bool):
    """Run the CUDA-only paths (fused element-wise, the engine's own decode kernels, fla-core gated
    delta rule) on CPU tensors."""
    from specpilot.engines.models import layers
    from specpilot.kernels import add_rms_norm as add_norm
    from specpilot.kernels import gated_rms_norm as gated_norm
    from specpilot.kernels import kv_write
    from specpilot.kernels import qk_norm_rope
    from specpilot.kernels import short_conv
    from specpilot.kernels import slot_attention
    from specpilot.kernels.gated_delta_rule import dispatch
    from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref

    def fused_recurrent(q, k, v, g, beta, initial_state, output_final_state=False,
                        use_qk_l2norm_in_kernel=False):
        with counter.opaque(FLA_FUSED_RECURRENT_KERNELS):
            out, final, _ = gated_delta_rule_ref(q, k, v, g, beta, initial_state)
        return out, final

    def chunked(*args, **kwargs):  # decode phases verify <= 64 rows: the recurrent kernel serves
        raise RuntimeError("kernel counting reached fla's chunked (prefill) kernel inside a decode "
                           "phase: more than 64 rows in one step are not counted")

    fla = types.ModuleType("fla.ops.gated_delta_rule")
    fla.fused_recurrent_gated_delta_rule, fla.chunk_gated_delta_rule = fused_recurrent, chunked

    def fla_path(q, k, v, g, beta, initial_state, keep_steps, steps_out, steps_kernel, final_out):
        if keep_steps and steps_kernel == "fused":  # kernels/gated_delta_rule/steps.py: one launch
            with counter.opaque(1):
                return gated_delta_rule_ref(q, k, v, g, beta, initial_state, keep_steps)
        return dispatch._fla(q, k, v, g, beta, initial_state, keep_steps, steps_out, final_out)

    def recurrent_into(q, k, v, g, beta, initial_state, final_state):  # one fla launch, in place
        with counter.opaque(FLA_FUSED_RECURRENT_KERNELS):
            out, final, _ = gated_delta_rule_ref(q, k, v, g, beta, initial_state)
            final_state.copy_(final)
        return out

    with contextlib.ExitStack() as stack:
        stubs = {"fla": types.ModuleType("fla"), "fla.ops": types.ModuleType("fla.ops"),
                 "fla.ops.gated_delta_rule": fla}
        saved = {name: sys.modules.get(name) for name in stubs}
        sys.modules.update(stubs)  # only these keys: modules first imported meanwhile stay
        stack.callback(_restore_modules, saved)
        stack.enter_context(mock.patch.object(dispatch, "_run", fla_path))
        stack.enter_context(mock.patch.object(dispatch, "_fused_recurrent_into", recurrent_into))
        if fused:
            stack.enter_context(mock.patch.object(layers, "compiled",
                                                  lambda fn: _opaque(counter, fn)))
            # the engine's own decode kernels: one launch each, whatever their reference runs
            one_launch = {"conv_silu_gates": (short_conv.conv_silu_gates,
                                              short_conv.conv_silu_gates_ref),
                          "add_rms_norm": (add_norm.add_rms_norm, add_norm.add_rms_norm_ref),
                          "kv_write": (kv_write.kv_write, kv_write.kv_write_ref),
                          "gated_rms_norm_kernel": (gated_norm.gated_rms_norm,
                                                    gated_norm.gated_rms_norm_ref),
                          "qk_norm_rope": (qk_norm_rope.qk_norm_rope,
                                           qk_norm_rope.qk_norm_rope_ref)}
            for name, (kernel, reference) in one_launch.items():
                _patch_call_sites(stack, name, kernel, _opaque(counter, reference))
            _patch_call_sites(stack, "slot_attention", slot_attention.slot_attention,
                              _opaque(counter, slot_attention.slot_attention_ref,
                                      slot_attention.LAUNCHES))
        yield


def _patch_call_sites(stack: contextlib.ExitStack, name: str, original, replacement) -> None:
    """Replace ``original`` by ``replacement`` in every loaded specpilot module that imported it
    as ``name`` (for as long as ``stack`` is open)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("specpilot.") and \
                getattr(module, name, None) is original:
            stack.enter_context(mock.patch.object(module, name, replacement))


def _opaque(counter, fn, launches: int = 1):
    """``fn`` counted as ``launches`` kernels, whatever ops it runs."""
    def run(*args, **kwargs):
        with counter.opaque(launches):
            return fn(*args, **kwargs)
    return run


def _restore_modules(saved: dict) -> None:
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


def kernel_counts(target_config: dict, drafter_config: dict | None, recipe) -> dict[str, int]:
    """Kernels per step of each phase of ``recipe`` on a CUDA engine: ``ar`` (the target forward of
    the AR step the gap table calibrates with: same gemm, graphs and fusion) and, for a speculative
    recipe, ``draft``, ``verify`` and ``commit``.

    Cached per (configs, recipe); a first call takes about a second per 64 target layers (the
    models decode one short request on the CPU at toy width). A W12 GEMM is one kernel, as a bf16
    one: the count runs the plain models.
    """
    key = stable_hash({"target": target_config, "drafter": drafter_config,
                       "recipe": recipe.hash()})
    if key not in _CACHE:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # toy-width ops: worker threads only wait on each other
        try:
            _CACHE[key] = _count(target_config, drafter_config, recipe)
        finally:
            torch.set_num_threads(threads)
    return dict(_CACHE[key])


def _count(target_config: dict, drafter_config: dict | None, recipe) -> dict[str, int]:
    from specpilot.engines.models import random_model
    from specpilot.recipe import AR

    dtype = torch.bfloat16
    target = random_model(shrink_config(target_config), dtype=dtype)
    ar = AR.replace(gemm=recipe.gemm, cuda_graphs=recipe.cuda_graphs,
                    fused_elementwise=recipe.fused_elementwise)
    out = {"ar": _phases(target, None, ar)["verify"]}
    if recipe.speculative and drafter_config is not None:
        drafter = random_model(shrink_config(drafter_config), dtype=dtype, seed=1)
        out.update({p: n for p, n in _phases(target, drafter, recipe).items() if p in PHASES})
    return out


def _phases(target, drafter, recipe) -> dict[str, int]:
    """Kernels per phase of the last decode step of one short greedy request."""
    from specpilot.engines.engine import Engine
    from specpilot.engines.engine import SamplingParams

    engine = Engine(target, drafter, recipe, max_len=128)
    engine.fused = recipe.fused_elementwise  # the CUDA engine's choice (a CPU engine never fuses)
    # Engine.use_graphs on a CUDA device
    graphs = recipe.cuda_graphs and recipe.verify_budget == "static" and \
        not getattr(recipe, "tree_verify", False)
    counter = KernelCounter()
    labels = _Labels(counter)
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)  # one or two steps
    with _gpu_paths(counter, recipe.fused_elementwise), counter:
        engine.generate(list(range(1, 17)), params, timer=labels)
    counts = labels.steps[-1]
    if graphs:
        counts = {p: n + GRAPH_INPUT_COPIES if p != "accept" else n for p, n in counts.items()}
        if drafter is None:
            counts["verify"] += AR_GRAPH_SELF_FEED
    return counts


def measure_launch_us(device, num_kernels: int = 512, replays: int = 7) -> float | None:
    """Microseconds per kernel of a CUDA graph of ``num_kernels`` dependent tiny kernels (an in-place
    add on a 256-element tensor): the fixed cost every kernel of a captured step pays. Median over
    ``replays`` timed replays after a warm-up; None off CUDA."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    with torch.cuda.device(device):
        x = torch.zeros(256, device=device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up off the capture, as CapturedStep does
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(num_kernels):
                x.add_(1.0)
        for _ in range(3):
            graph.replay()
        times_ms = []
        for _ in range(replays):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
    return statistics.median(times_ms) * 1e3 / num_kernels
