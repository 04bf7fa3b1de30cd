"""The FastAPI app: generation routes, ``/v1/models``, ``/health``, ``/server_info``, ``/metrics``,
and error handling that answers every bad request with an OpenAI-style 4xx body.

Example::

    models = load_models(load_setting("cpu_c1_tiny"))
    engine = build_engine(models, "stock")
    app = create_app(models, engine, Scheduler(engine, max_batch=16), engine_name="stock")
    uvicorn.run(app, host="127.0.0.1", port=30000)
"""

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from specpilot import __version__
from specpilot.engines.server.chat import ChatTemplate
from specpilot.engines.server.generation import ServerState
from specpilot.engines.server.metrics import ServerMetrics
from specpilot.engines.server.protocol import APIError
from specpilot.engines.server.protocol import ModelCard
from specpilot.engines.server.protocol import ModelList
from specpilot.engines.server.protocol import make_protocol
from specpilot.engines.server.routes import add_generation_routes

METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}


class RequestCounter:
    """ASGI middleware: counts every HTTP answer by method, route template and status."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500  # an exception that escapes before any answer is a server error

        async def counting_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = scope.get("route")  # set by FastAPI routes; /openapi.json and /docs lack it
            path = route.path if route is not None else (
                scope["path"] if status < 400 else "unmatched")
            self.metrics.http.labels(method, path, str(status)).inc()


def _error(status: int, message: str, param: str | None = None, code: str | None = None,
           type: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(APIError(status, message, param, code, type).body(), status_code=status)


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    """A one-line message naming the first bad field, and that field (OpenAI's ``param``)."""
    errors = err.errors() or [{"loc": (), "msg": "invalid request"}]
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", first.get("msg"))
        return f"malformed JSON body: {detail}", None
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    if not loc and first.get("type") in ("model_attributes_type", "dict_type", "model_type",
                                         "missing"):
        return ("the request body must be a JSON object of this endpoint's schema (send "
                f"Content-Type: application/json): {first.get('msg')}"), None
    more = len(errors) - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more > 0 else ""
    where = f"{'.'.join(loc)}: " if loc else ""
    return f"{where}{first.get('msg')}{suffix}", (loc[0] if loc else None)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request, err: APIError):
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, err: RequestValidationError):
        message, param = _validation_message(err)
        return _error(400, message, param)

    @app.exception_handler(HTTPException)
    async def http_error(request, err: HTTPException):
        kind = "invalid_request_error" if err.status_code < 500 else "server_error"
        return _error(err.status_code, str(err.detail), type=kind)

    @app.exception_handler(Exception)
    async def unexpected(request, err: Exception):
        return _error(500, f"internal error: {type(err).__name__}: {err}", type="server_error")


def _document_400_not_422(app: FastAPI) -> None:
    """Bad requests are answered 400 (OpenAI) by the handler above: drop FastAPI's 422 entries."""
    build = app.openapi

    def openapi() -> dict:
        schema = build()
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        return schema

    app.openapi = openapi


def _avg_accept_length(stats) -> float:
    counts = dict(stats.accept_lengths)
    steps = sum(counts.values())
    return sum(k * v for k, v in counts.items()) / steps if steps else 0.0


def create_app(models, engine, scheduler, *, engine_name: str,
               max_tokens_limit: int | None = None) -> FastAPI:
    """The HTTP app serving ``engine`` through ``scheduler`` (the caller owns and shuts it down).

    Args:
        models: ``specpilot.build.Models`` (tokenizer, setting, target); the served model id is the
            setting name.
        engine: the engine the scheduler runs; ``engine_name`` is how it was built (``stock``).
        max_tokens_limit: the largest ``max_tokens`` a request may ask (default: the context).
    """
    from specpilot import fingerprint
    from specpilot.build import resolve

    setting = models.setting
    context = engine.context
    limit = min(max_tokens_limit or context - 1, context - 1)
    target_dir = resolve(setting.target, setting, "target")
    metrics = ServerMetrics(scheduler, engine.block_size)
    state = ServerState(
        models=models, engine=engine, scheduler=scheduler, engine_name=engine_name,
        model_name=setting.name, protocol=make_protocol(limit, setting.name),
        chat_template=ChatTemplate.for_checkpoint(target_dir if not isinstance(target_dir, dict)
                                                  else None),
        metrics=metrics,
        info={"setting": setting.name, "setting_hash": setting.hash(), "engine": engine_name,
              "recipe": engine.recipe.to_dict(), "recipe_hash": engine.recipe.hash(),
              "fingerprint": fingerprint.current(str(engine.device)).to_dict(),
              "speculative": engine.drafter is not None, "block_size": engine.block_size,
              "max_batch": scheduler.batch.max_batch, "max_len": engine.max_len,
              "context": context, "max_tokens_limit": limit, "device": str(engine.device),
              "version": __version__})
    state.info["chat_template"] = state.chat_template.origin
    app = FastAPI(title="SpecPilot", version=__version__,
                  description=f"Serving {setting.name} with the {engine_name} engine "
                              "(OpenAI- and SGLang-compatible).",
                  strict_content_type=False)  # a body without Content-Type is read as JSON
    app.state.server = state
    app.add_middleware(RequestCounter, metrics=metrics)
    _add_error_handlers(app)
    add_generation_routes(app, state)

    @app.get("/health")
    async def health() -> dict:
        """200 while the server is up."""
        return {"status": "ok"}

    @app.get("/v1/models", response_model=ModelList)
    async def list_models() -> ModelList:
        """The one served model: the setting name."""
        return ModelList(data=[ModelCard(id=state.model_name, created=state.created,
                                         max_model_len=context)])

    @app.get("/server_info")
    async def server_info() -> dict:
        """Setting, recipe, fingerprint and the running acceptance length (SGLang's
        ``internal_states[0].avg_spec_accept_length``)."""
        stats = scheduler.stats
        live = {"avg_spec_accept_length": _avg_accept_length(stats),
                "num_running_reqs": scheduler.num_running, "queue_depth": scheduler.queue_depth}
        return {**state.info, **live, "internal_states": [live],
                "requests_total": stats.requests_total, "tokens_total": stats.tokens_total,
                "steps_total": stats.steps_total}

    _document_400_not_422(app)

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus exposition of the app's registry."""
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
