"""Engine names the CLI accepts: recipes (``ar``, ``stock``, a setting's ``recipes/<name>.json``),
any of them with catalog mechanisms added (``stock+batched-prefill``), and, for ``validate`` only,
the deliberately broken engines."""

from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.settings import Setting

BUILTIN = {"ar": AR, "stock": STOCK}


def recipe_for(setting: Setting, name: str) -> Recipe:
    """``ar``/``stock``, or ``settings/<setting>/recipes/<name>.json``; ``final`` falls back to the
    champion the last campaign wrote into the default campaign store (``specpilot search``).
    ``BASE+MECH[+MECH..]``: recipe BASE with the named mechanisms' deltas from the search catalog
    (``search/catalog.toml``) applied in order."""
    if "+" in name:
        return _with_mechanisms(setting, name)
    if name in BUILTIN:
        return BUILTIN[name]
    path = setting.directory / "recipes" / f"{name}.json"
    if path.is_file():
        return Recipe.from_json(path)
    if name == "final":  # the champion of the last campaign in the default campaign store
        from specpilot.search.driver import default_store_dir

        champion = default_store_dir() / "final" / f"{setting.name}.json"
        if champion.is_file():
            return Recipe.from_json(champion)
    known = sorted(set(BUILTIN) | {p.stem for p in (setting.directory / "recipes").glob("*.json")})
    hint = " (the search campaign writes 'final')" if name == "final" else ""
    raise SpecPilotError(f"setting {setting.name} has no engine {name!r}{hint}; known: {known}")


def _with_mechanisms(setting: Setting, name: str) -> Recipe:
    from specpilot.search.catalog import load_catalog
    from specpilot.search.catalog import resolve_delta

    base, *extras = name.split("+")
    catalog = {m.name: m for m in load_catalog() if not m.canary and m.fault is None}
    recipe = recipe_for(setting, base)
    for extra in extras:
        if extra not in catalog:
            raise SpecPilotError(f"engine {name!r}: no mechanism {extra!r} in the search catalog; "
                                 f"known: {sorted(catalog)}")
        delta = resolve_delta(catalog[extra], setting)
        if delta is None:
            raise SpecPilotError(f"engine {name!r}: the cost model has no {extra!r} for setting "
                                 f"{setting.name} (nothing better than the catalog's default)")
        recipe = recipe.with_delta(delta)
    return recipe.replace(name=name)


def build_engine(models, name: str):
    """An engine by name; ``broken:<kind>`` builds a deliberately broken stock engine."""
    if name.startswith("broken:"):
        from specpilot.validation.broken import BROKEN_ENGINES

        kind = name.split(":", 1)[1]
        if kind not in BROKEN_ENGINES:
            raise SpecPilotError(f"unknown broken engine {kind!r}; known: {sorted(BROKEN_ENGINES)}")
        return BROKEN_ENGINES[kind](models.target, models.drafter, STOCK,
                                    max_len=models.setting.engine.max_len)
    return models.engine(recipe_for(models.setting, name))
