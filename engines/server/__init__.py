"""OpenAI- and SGLang-compatible HTTP server over the continuous-batching scheduler (DESIGN §3.4).

Needs the serving extras (fastapi, uvicorn, prometheus-client, jinja2); ``specpilot serve`` runs
it.
"""

from specpilot.engines.server.app import create_app

__all__ = ["create_app"]
