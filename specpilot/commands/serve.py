"""``specpilot serve SETTING ENGINE``: an OpenAI- and SGLang-compatible HTTP server (DESIGN §3.4).

The served model id is the setting name. Endpoints: ``POST /generate``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /v1/models``, ``/health``, ``/server_info``, ``/metrics``,
``/docs`` and ``/openapi.json``.

``specpilot serve --bundle DIR`` serves an exported bundle (:mod:`specpilot.bundle`): its setting,
its recipe and its tuned kernel configs, nothing from ``settings/``. Before loading any model it
refuses (exit 2) a bundle that fails its integrity check, whose checkpoints differ from the pinned
ones, or that was validated on another stack (GPU SKU or compute capability, driver major version,
CUDA, torch or triton differ). ``--revalidate`` serves on another stack after token forcing passes
here (the bundle's budget); when it fails the server does not start (exit 1).
"""

import dataclasses
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str | None, Positional, "deployment setting, e.g. cpu_c1_tiny (with "
                       "--bundle: optional, must be the bundle's)"] = None
    engine: Annotated[str | None, Positional, "engine: final, stock, ar, or a recipe name of the "
                      "setting (not with --bundle)"] = None
    gpu: Annotated[int | None, "CUDA device index; none: the setting's device"] = None
    host: Annotated[str, "address to listen on"] = "127.0.0.1"
    port: Annotated[int, "port to listen on"] = 30000
    max_batch: Annotated[int, "requests decoded together (continuous batching rows)"] = 16
    max_tokens_limit: Annotated[int | None,
                                "largest max_tokens a request may ask; none: the context"] = None
    log_level: Annotated[Literal["critical", "error", "warning", "info", "debug"],
                         "uvicorn log level"] = "info"
    bundle: Annotated[str | None, "serve this exported bundle (specpilot export) instead of "
                      "SETTING ENGINE"] = None
    revalidate: Annotated[bool, "with --bundle: token-force the engine here first and serve "
                          "only if it passes (needed when the stack differs)"] = False

    def __post_init__(self):
        if self.bundle is None and (self.setting is None or self.engine is None):
            raise ValueError("give SETTING ENGINE, or --bundle DIR")
        if self.bundle is not None and self.engine is not None:
            raise ValueError("--bundle serves the bundle's own engine; leave out ENGINE")
        if self.revalidate and self.bundle is None:
            raise ValueError("--revalidate applies to --bundle only")
        if self.engine is not None and self.engine.startswith("broken:"):
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
    if args.bundle is not None:
        return _run_bundle(args)
    from specpilot.build import load_models
    from specpilot.engine_names import build_engine
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    recipe = recipe_for(setting, args.engine)  # an unknown engine fails before any model loads
    models = load_models(place(setting, args.gpu), with_drafter=recipe.speculative)
    models.setting = setting  # served name and hash are the setting's, whatever the device index
    return _serve(args, models, build_engine(models, args.engine), args.engine)


def _serve(args: Args, models, engine, engine_name: str, info: dict | None = None) -> int:
    import uvicorn

    from specpilot.engines.scheduler import Scheduler
    from specpilot.engines.server import create_app

    scheduler = Scheduler(engine, max_batch=args.max_batch)
    try:
        app = create_app(models, engine, scheduler, engine_name=engine_name,
                         max_tokens_limit=args.max_tokens_limit)
        app.state.server.info.update(info or {})
        print(f"specpilot serve: {models.setting.name} ({engine_name}, {engine.device}) on "
              f"http://{args.host}:{args.port}", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        scheduler.shutdown()
    return 0


def _run_bundle(args: Args) -> int:
    """Serve a bundle: integrity, checkpoint pins and stack checked before any model loads."""
    import os
    import sys

    from specpilot import bundle as bundles
    from specpilot.build import load_models
    from specpilot.errors import SpecPilotError
    from specpilot.fingerprint import current

    bundle = bundles.open_bundle(args.bundle)
    setting, recipe = bundle.setting, bundle.recipe
    if args.setting is not None and args.setting != setting.name:
        raise SpecPilotError(f"bundle {bundle.directory} holds setting {setting.name!r}, not "
                             f"{args.setting!r}")
    problems = bundles.check_pins(setting, bundle.checkpoints)
    if problems:
        raise SpecPilotError(f"bundle {bundle.directory}: the checkpoints here are not the "
                             "exported ones: " + "; ".join(problems))
    setting_here = place(setting, args.gpu)
    device = setting_here.engine.device
    stack_here = current("cpu" if device == "cpu" else device).to_dict()
    changes = bundles.stack_changes(bundle.fingerprint, stack_here, driver_major_only=True)
    if changes and not args.revalidate:
        raise SpecPilotError(
            f"bundle {bundle.directory} was validated on another stack "
            f"({bundles.describe_changes(changes)}); its engine may not compute the same tokens "
            "here. Serve with --revalidate to token-force it on this stack first.")
    # The engine's kernel lookups read the bundle's tuned configs, never this machine's cache.
    os.environ["SPECPILOT_CACHE_DIR"] = str(bundle.kernel_dir)
    models = load_models(setting_here, with_drafter=recipe.speculative)
    models.setting = setting
    info = {"bundle": {"directory": str(bundle.directory), "digest": bundle.manifest["digest"],
                       "source": bundle.manifest["source"], "stack_changes": changes}}
    if args.revalidate:
        budget = bundle.validation["budget"]
        print(f"specpilot serve: re-validating {recipe.name} on this stack "
              f"({budget['num_prompts']} prompts x {budget['max_new_tokens']} tokens)", flush=True)
        validation = bundles.token_force(models, recipe, budget)
        report = validation["report"]
        info["bundle"]["revalidation"] = {k: report[k] for k in (
            "passed", "num_prompts", "num_tokens", "num_mismatches", "failures")}
        if not report["passed"]:
            print(f"specpilot serve: refusing to serve: {recipe.name} fails token forcing on "
                  "this stack:", file=sys.stderr)
            for failure in report["failures"]:
                print(f"  - {failure}", file=sys.stderr)
            return 1
        print(f"specpilot serve: token forcing passed ({report['num_tokens']} tokens, "
              f"{report['num_mismatches']} near-tie mismatches)", flush=True)
    return _serve(args, models, models.engine(recipe), f"bundle:{recipe.name}", info)
