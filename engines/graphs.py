"""CUDA-graph capture of fixed-shape step functions (decode, draft, verify, commit).

``CapturedStep(fn, inputs)`` runs ``fn(**inputs)`` a few times on a side stream (Triton autotuning and
lazy allocations happen there), captures one call, and from then on ``step(**new_inputs)`` copies the
new values into the captured input tensors and replays. Outputs are the captured output tensors:
read them before the next replay overwrites them.
"""

import torch


class CapturedStep:
    def __init__(self, fn, inputs: dict[str, torch.Tensor], pool=None, warmup: int = 3):
        self.inputs = {name: t.clone() for name, t in inputs.items()}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn(**self.inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = fn(**self.inputs)

    def __call__(self, **inputs):
        for name, value in inputs.items():
            self.inputs[name].copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs
