"""The ``specpilot`` command line, generated from typed argument dataclasses.

Each command lives in ``specpilot/commands/<name>.py`` and defines a frozen dataclass ``Args`` whose
fields carry their help text as ``Annotated[type, "help"]`` (positional fields are marked with
:class:`Positional`), plus ``run(args) -> int``. Command modules are imported only when that command
runs, so ``specpilot --help`` needs none of the heavy optional dependencies.
"""

import argparse
import dataclasses
import importlib
import sys
import types
import typing

from specpilot.errors import SpecPilotError

COMMANDS = {
    "generate": ("specpilot.commands.generate", "Generate text with one engine and print tau."),
    "validate": ("specpilot.commands.validate", "Token-force an engine against the AR reference."),
    "serve": ("specpilot.commands.serve",
              "Serve an engine over HTTP (OpenAI- and SGLang-compatible)."),
    "tune-kernel": ("specpilot.commands.tune_kernel",
                    "Tune one Triton kernel for a weight shape with Optuna and cache the best config."),
    "bench": ("specpilot.commands.bench",
              "Benchmark one engine (or a running server with --url) on the setting's prompts."),
    "compare": ("specpilot.commands.compare",
                "Interleaved A/B speed comparison: median speedup with its bootstrap CI."),
    "score": ("specpilot.commands.score",
              "Score answer quality on gsm8k, math500, humaneval or mbpp (a sanity check)."),
    "report": ("specpilot.commands.report",
               "Render the README results tables from experiments/results."),
    "sps-table": ("specpilot.commands.sps_table",
                  "Measure the confidence budget's steps/s table; write a recipe that uses it."),
    "costmodel": ("specpilot.commands.costmodel",
                  "Per-phase byte/FLOP floors, the speedup bound and the gap table of a setting."),
    "search": ("specpilot.commands.search",
               "Run or resume a search campaign (Ray workers, MLflow records) and print the champion."),
    "export": ("specpilot.commands.export",
               "Write a hash-checked bundle of a recorded engine, for serve --bundle."),
    "retune": ("specpilot.commands.retune",
               "After a stack change: re-validate, re-tune and re-bench the champion; record it."),
    "ui": ("specpilot.commands.ui",
           "Open a campaign's MLflow records in the MLflow UI on 127.0.0.1."),
}


class Positional:
    """Marker in ``Annotated[...]`` metadata: the field is a positional argument."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """Add one argument per field of dataclass ``cls``; types, defaults and help come from the field."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        meta = getattr(hint, "__metadata__", ())
        base = typing.get_args(hint)[0] if meta else hint
        help_text = next((m for m in meta if isinstance(m, str)), "")
        positional = any(m is Positional for m in meta)
        choices = None
        origin = typing.get_origin(base)
        if origin is typing.Literal:
            choices = list(typing.get_args(base))
            base = type(choices[0])
        optional = (origin is typing.Union or isinstance(base, types.UnionType)) and \
            type(None) in typing.get_args(base)
        if optional:
            base = next(a for a in typing.get_args(base) if a is not type(None))
        has_default = field.default is not dataclasses.MISSING
        default = field.default if has_default else None
        if positional:  # a positional with a default may be left out
            parser.add_argument(field.name, type=base, choices=choices, help=help_text,
                                **({"nargs": "?", "default": default} if has_default else {}))
        elif base is bool:
            parser.add_argument(_flag(field.name), action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
        else:
            parser.add_argument(
                _flag(field.name), dest=field.name, type=base, choices=choices, default=default,
                required=not has_default, help=f"{help_text} (default: {default})" if has_default else help_text,
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specpilot", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        cmd = sub.add_parser(name, help=summary, description=summary)
        cmd.set_defaults(_module=module_name)
        module = importlib.import_module(module_name)
        add_dataclass_args(cmd, module.Args)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    module = importlib.import_module(ns._module)
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(module.Args)}
    try:
        args = module.Args(**values)
    except ValueError as err:
        parser.error(str(err))
    try:
        return int(module.run(args) or 0)
    except (SpecPilotError, ValueError) as err:  # bad input: a message, not a traceback
        print(f"specpilot {ns.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # run through the package module so Positional is one class
    from specpilot.cli import main as package_main

    sys.exit(package_main())
