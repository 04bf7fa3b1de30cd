"""``specpilot serve SETTING ENGINE``: an OpenAI- and SGLang-compatible HTTP server (DESIGN §3.4).

The served model id is the setting name. Endpoints: ``POST /generate``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /v1/models``, ``/health``, ``/server_info``, ``/metrics``,
``/docs`` and ``/openapi.json``.
"""

import dataclasses
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    engine: Annotated[str, Positional, "engine: final, stock, ar, or a recipe name of the setting"]
    gpu: Annotated[int | None, "CUDA device index; none: the setting's device"] = None
    host: Annotated[str, "address to listen on"] = "127.0.0.1"
    port: Annotated[int, "port to listen on"] = 30000
    max_batch: Annotated[int, "requests decoded together (continuous batching rows)"] = 16
    max_tokens_limit: Annotated[int | None,
                                "largest max_tokens a request may ask; none: the context"] = None
    log_level: Annotated[Literal["critical", "error", "warning", "info", "debug"],
                         "uvicorn log level"] = "info"

    def __post_init__(self):
        if self.engine.startswith("broken:"):
            raise ValueError("broken engines are for `specpilot validate` only")
        if self.max_batch < 1:
            raise ValueError("--max-batch must be >= 1")
        if self.max_tokens_limit is not None and self.max_tokens_limit < 1:
            raise ValueError("--max-tokens-limit must be >= 1")
        if self.gpu is not None and self.gpu < 0:
            raise ValueError("--gpu must be >= 0")
        if not 0 <= self.port <= 65535:
            raise ValueError("--port must be in 0..65535")


def place(setting, gpu: int | None):
    """The setting on the device to serve from; errors if it needs a GPU that is not there."""
    import torch

    from specpilot.errors import SpecPilotError

    device = setting.engine.device
    if not device.startswith("cuda"):
        if gpu is not None:
            raise SpecPilotError(f"setting {setting.name} runs on {device}; --gpu does not apply")
        return setting
    if not torch.cuda.is_available():
        raise SpecPilotError(f"setting {setting.name} needs a GPU (device {device!r}) but CUDA "
                             "sees none")
    if gpu is None:
        return setting
    if gpu >= torch.cuda.device_count():
        raise SpecPilotError(f"--gpu {gpu}: only {torch.cuda.device_count()} GPU(s) visible")
    torch.cuda.set_device(gpu)
    engine = dataclasses.replace(setting.engine, device=f"cuda:{gpu}")
    return dataclasses.replace(setting, engine=engine)


def run(args: Args) -> int:
    import uvicorn

    from specpilot.build import load_models
    from specpilot.engine_names import build_engine
    from specpilot.engine_names import recipe_for
    from specpilot.engines.scheduler import Scheduler
    from specpilot.engines.server import create_app
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    recipe = recipe_for(setting, args.engine)  # an unknown engine fails before any model loads
    setting_here = place(setting, args.gpu)
    models = load_models(setting_here, with_drafter=recipe.speculative)
    models.setting = setting  # served name and hash are the setting's, whatever the device index
    engine = build_engine(models, args.engine)
    scheduler = Scheduler(engine, max_batch=args.max_batch)
    try:
        app = create_app(models, engine, scheduler, engine_name=args.engine,
                         max_tokens_limit=args.max_tokens_limit)
        print(f"specpilot serve: {setting.name} ({args.engine}, {engine.device}) on "
              f"http://{args.host}:{args.port}", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        scheduler.shutdown()
    return 0
