"""Engine bundles (DESIGN.md §8): one directory holding everything ``serve --bundle`` needs.

``specpilot export`` writes one from an MLflow run; ``specpilot serve --bundle DIR`` serves it.
Layout (paths relative to the bundle directory)::

    manifest.json         format, version, provenance, the sha256 of every other file and the
                          manifest's own digest
    recipe.json           the engine (:class:`specpilot.recipe.Recipe`)
    fingerprint.json      the stack the engine passed token forcing on
    validation.json       that token-forcing report, the budget it ran with and where it ran
    bench.json            the exported run's bench record (its A/B compare block or measurement)
    checkpoints.json      the pinned model sources: HF commit and blob ids, or content hashes
    kernels/configs.json  tuned kernel configs of the setting's shapes on that stack, in the tuning
                          cache's own format (may hold no entries, e.g. on CPU)
    setting/setting.toml  the setting, HF revisions pinned to commits (``random:`` configs beside)

Integrity, not authenticity: :func:`open_bundle` refuses a bundle whose files differ from the
manifest's hashes, that lacks a listed file or holds an unlisted one, or whose manifest no longer
matches its own digest. Someone who rewrites the manifest consistently is not caught; keep the
digest ``export`` prints (or sign ``manifest.json``) where that matters.

Checkpoint pins. ``generated:``, ``bundled:`` and local-directory sources are pinned by the sha256
of each file (files over :data:`FULL_HASH_MAX_BYTES` by size plus the hash of their first and last
16 MiB, marked ``sampled``); ``random:`` by the config file's hash; ``hf:`` by the snapshot commit
and the blob id of each file in the HF cache (blob ids are content hashes, so nothing is re-read).

The module also holds what ``export``, ``serve --bundle`` and ``retune`` share: reading a
campaign's MLflow store, the validation budget, and re-running token forcing on this machine.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from specpilot.errors import SpecPilotError

FORMAT, VERSION = "specpilot-bundle", 1
MANIFEST = "manifest.json"
STACK_FIELDS = ("gpu", "compute_capability", "driver", "cuda", "torch", "triton")
"""Fingerprint fields whose change can change tokens or kernel choice (``commit`` and ``python``
cannot). Tuned kernel configs are keyed by all six exactly (``Fingerprint.kernel_key``)."""
FULL_HASH_MAX_BYTES = 512 << 20
_SAMPLE_BYTES = 16 << 20


# --- hashing and fingerprints ------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_pin(path: Path) -> str:
    size = path.stat().st_size
    if size <= FULL_HASH_MAX_BYTES:
        return sha256_file(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(_SAMPLE_BYTES))
        fh.seek(size - _SAMPLE_BYTES)
        digest.update(fh.read(_SAMPLE_BYTES))
    return "sampled:" + digest.hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def kernel_key(fingerprint: dict) -> str:
    """``Fingerprint.kernel_key`` of a fingerprint dict (MLflow ``fp.*`` tags or a record)."""
    return "|".join(str(fingerprint.get(f, "")) for f in STACK_FIELDS)


def stack_changes(old: dict, new: dict, driver_major_only: bool = False) -> dict:
    """``{field: [old, new]}`` for each :data:`STACK_FIELDS` entry that differs.

    ``driver_major_only``: a driver update within one major version does not count (what decides
    whether a validated engine may still be served; tuned kernel configs need the exact driver).
    """
    changes = {}
    for field in STACK_FIELDS:
        a, b = str(old.get(field, "")), str(new.get(field, ""))
        if driver_major_only and field == "driver":
            a, b = a.split(".")[0], b.split(".")[0]
        if a != b:
            changes[field] = [str(old.get(field, "")), str(new.get(field, ""))]
    return changes


def describe_changes(changes: dict) -> str:
    return ", ".join(f"{field} {old!r} -> {new!r}" for field, (old, new) in changes.items())


# --- the setting and its checkpoints -----------------------------------------------------------
def load_setting_file(path: Path):
    """A :class:`specpilot.settings.Setting` from the bundle's ``setting.toml`` (the strict rules
    of :func:`specpilot.settings.load_setting`; ``random:`` paths resolve beside the file)."""
    from specpilot.settings import load_setting_file as load

    return load(path)


def _sources(setting) -> dict:
    out = {"target": setting.target}
    if setting.drafter is not None:
        out["drafter"] = setting.drafter
    return out


def pin_source(setting, role: str) -> dict:
    """What identifies ``role``'s checkpoint exactly (see the module docstring)."""
    from specpilot.build import resolve

    source = _sources(setting)[role]
    kind, _, rest = source.source.partition(":")
    resolved = resolve(source, setting, role)
    pin = {"source": source.source, "seed": source.seed}
    if isinstance(resolved, dict):
        return {**pin, "kind": "random", "config": rest,
                "sha256": sha256_file(setting.directory / rest)}
    files = sorted(p for p in resolved.rglob("*") if p.is_file())
    if kind == "hf":
        repo = rest.partition("@")[0]
        blobs = {str(p.relative_to(resolved)): (Path(os.readlink(p)).name if p.is_symlink()
                                               else sha256_file(p)) for p in files}
        return {**pin, "kind": "hf", "pinned": f"hf:{repo}@{resolved.name}",
                "commit": resolved.name, "files": blobs}
    return {**pin, "kind": kind if kind in ("generated", "bundled") else "local",
            "files": {str(p.relative_to(resolved)): _file_pin(p) for p in files}}


def check_pins(setting, pins: dict) -> list[str]:
    """Differences between the checkpoints ``setting`` resolves to here and ``pins``."""
    problems = []
    roles = set(_sources(setting))
    if roles != set(pins):
        return [f"model roles {sorted(roles)} != pinned {sorted(pins)}"]
    for role, pinned in pins.items():
        here = pin_source(setting, role)
        for field in ("kind", "sha256", "commit", "files"):
            if here.get(field) != pinned.get(field):
                now, then = here.get("files", {}), pinned.get("files", {})
                changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))
                detail = f" (files {changed[:5]})" if field == "files" else ""
                problems.append(f"{role} checkpoint {pinned['source']!r}: {field} differs from "
                                f"the exported one{detail}")
                break
    return problems


def _pinned_setting_text(setting, pins: dict) -> str:
    """``setting.toml`` with every ``hf:`` source pinned to its snapshot commit."""
    text = (setting.directory / "setting.toml").read_text()
    for role, pin in pins.items():
        if pin["kind"] != "hf" or pin["pinned"] == pin["source"]:
            continue
        quoted = [q + pin["source"] + q for q in ('"', "'") if q + pin["source"] + q in text]
        if not quoted:
            raise SpecPilotError(f"cannot pin {role} source {pin['source']!r} in "
                                 f"{setting.directory / 'setting.toml'}")
        text = text.replace(quoted[0], f'"{pin["pinned"]}"')
    return text


def linear_shapes(setting) -> set[tuple[int, int]]:
    """``(N, K)`` of every Linear weight of the setting's target and drafter (meta tensors)."""
    import torch

    from specpilot.build import resolve
    from specpilot.engines.models import model_class
    from specpilot.engines.models import read_config

    shapes = set()
    for role, source in _sources(setting).items():
        resolved = resolve(source, setting, role)
        config = resolved if isinstance(resolved, dict) else read_config(resolved)
        with torch.device("meta"):
            model = model_class(config)(config)
        shapes |= {tuple(m.weight.shape) for m in model.modules()
                   if isinstance(m, torch.nn.Linear)}
    return shapes


def kernel_entries(fingerprint: dict, shapes: set, directory: Path | None = None) -> dict:
    """Tuning-cache entries measured on ``fingerprint``'s stack for weights of ``shapes``."""
    from specpilot.kernels.tuning import cache

    try:
        entries = json.loads(cache.cache_file(directory).read_text()).get("entries", {})
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as err:
        raise SpecPilotError(f"{cache.cache_file(directory)}: {err}") from err
    suffix = "|" + kernel_key(fingerprint)
    return {key: entry for key, entry in entries.items()
            if key.endswith(suffix) and (entry_shape(key) or ("",))[1:3] in shapes}


def entry_shape(key: str) -> tuple[str, int, int, int] | None:
    """``(op, N, K, M bucket)`` of a tuning-cache key ``op|N=..|K=..|M=..|<kernel key>``, or None
    for a key of another form."""
    try:
        op, n, k, m = key.split("|")[:4]
        return op, int(n.removeprefix("N=")), int(k.removeprefix("K=")), int(m.removeprefix("M="))
    except ValueError:
        return None


# --- token forcing on this machine -------------------------------------------------------------
def validation_budget(setting, campaign: dict | None = None) -> dict:
    """The gate's parameters: the campaign's prompt and token counts (what its trials ran), else
    the setting's ``[validation]``; tolerances always from the setting."""
    val, campaign = setting.validation, campaign or {}
    return {"dataset": val.dataset,
            "num_prompts": campaign.get("validation_prompts") or val.num_prompts,
            "max_new_tokens": campaign.get("validation_tokens") or val.max_new_tokens,
            "seed": campaign.get("seed", 0), "epsilon": val.epsilon,
            "max_mismatch_rate": val.max_mismatch_rate, "num_canaries": val.num_canaries}


def token_force(models, recipe, budget: dict) -> dict:
    """Token-force ``recipe``'s engine against the AR engine on ``models``; the report as a dict
    (first 20 mismatches kept) with this machine's fingerprint."""
    from specpilot.datasets import load_prompts
    from specpilot.engines.engine import SamplingParams
    from specpilot.fingerprint import current
    from specpilot.recipe import AR
    from specpilot.validation import validate_engine
    from specpilot.validation.twin import strict_float32
    from specpilot.validation.twin import twin_of

    models = twin_of(models, recipe)  # a random-weight setting's validation twin, else these
    texts = load_prompts(budget["dataset"], budget["num_prompts"])
    prompts = [models.tokenizer.encode(t).ids for t in texts]
    params = SamplingParams(max_new_tokens=budget["max_new_tokens"])
    with strict_float32(models.setting.engine.dtype == "float32"):
        report = validate_engine(models.engine(AR), models.engine(recipe), prompts, params,
                                 epsilon=budget["epsilon"],
                                 max_mismatch_rate=budget["max_mismatch_rate"],
                                 num_canaries=budget["num_canaries"], seed=budget["seed"],
                                 name=recipe.name,
                                 concurrency=models.setting.scenario.concurrency).to_dict()
    report["mismatches"] = report["mismatches"][:20]
    device = "cuda" if models.setting.engine.device.startswith("cuda") else "cpu"
    return {"report": report, "budget": budget, "fingerprint": current(device).to_dict(),
            "validated_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


# --- writing and opening bundles ---------------------------------------------------------------
def write_bundle(out: Path, *, setting, recipe, fingerprint: dict, validation: dict, bench: dict,
                 kernels: dict, source: dict) -> dict:
    """Write a bundle into the new directory ``out``; returns its manifest.

    Written to a temporary sibling first and renamed, so a failed export leaves nothing behind.
    """
    from specpilot import __version__
    from specpilot.kernels.tuning import cache

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpecPilotError(f"--out {out} exists and is not an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    pins = {role: pin_source(setting, role) for role in _sources(setting)}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        files = {"recipe.json": recipe.to_dict(), "fingerprint.json": fingerprint,
                 "validation.json": validation, "bench.json": bench, "checkpoints.json": pins,
                 "kernels/configs.json": {"version": cache.VERSION, "entries": kernels}}
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        (tmp / "setting").mkdir()
        (tmp / "setting" / "setting.toml").write_text(_pinned_setting_text(setting, pins))
        for pin in pins.values():
            if pin["kind"] == "random":
                rel = Path(pin["config"])
                if rel.is_absolute() or ".." in rel.parts:
                    raise SpecPilotError(f"setting {setting.name}: random config {rel} must lie "
                                         "inside the setting directory to be bundled")
                (tmp / "setting" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(setting.directory / rel, tmp / "setting" / rel)
        bundled = load_setting_file(tmp / "setting" / "setting.toml")
        manifest = {"format": FORMAT, "version": VERSION, "setting": setting.name,
                    "setting_hash": setting.hash(), "bundled_setting_hash": bundled.hash(),
                    "recipe_name": recipe.name, "recipe_hash": recipe.hash(),
                    "kernel_key": kernel_key(fingerprint), "source": source,
                    "specpilot_version": __version__,
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "files": {rel: sha256_file(tmp / rel) for rel in _listing(tmp)}}
        manifest["digest"] = hashlib.sha256(_canonical(manifest)).hexdigest()
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _listing(root: Path) -> list[str]:
    """Every entry under ``root`` but the manifest, as relative paths; only plain files allowed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise SpecPilotError(f"bundle {root}: {rel} is not a plain file or directory")
        out += [(Path(dirpath) / n).relative_to(root).as_posix() for n in filenames]
    return sorted(rel for rel in out if rel != MANIFEST)


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A verified bundle: every file matched the manifest when it was opened."""

    directory: Path
    manifest: dict
    recipe: object
    setting: object
    fingerprint: dict
    validation: dict
    bench: dict
    checkpoints: dict

    @property
    def kernel_dir(self) -> Path:
        """A tuning-cache directory (``SPECPILOT_CACHE_DIR``) holding the bundle's configs."""
        return self.directory / "kernels"


def verify_bundle(directory: str | Path) -> dict:
    """The manifest of ``directory`` after checking every file against it; raises
    :class:`SpecPilotError` naming each modified, missing or extra file."""
    root = Path(directory)
    if not root.is_dir():
        raise SpecPilotError(f"bundle {root} is not a directory")
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise SpecPilotError(f"bundle {root} has no {MANIFEST}") from None
    except (OSError, json.JSONDecodeError) as err:
        raise SpecPilotError(f"bundle {root}: unreadable {MANIFEST}: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SpecPilotError(f"bundle {root}: {MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise SpecPilotError(f"bundle {root}: format version {manifest.get('version')!r}; "
                             f"this specpilot reads version {VERSION}")
    body = {k: v for k, v in manifest.items() if k != "digest"}
    if hashlib.sha256(_canonical(body)).hexdigest() != manifest.get("digest"):
        raise SpecPilotError(f"bundle {root}: {MANIFEST} was modified (its digest does not match)")
    listed, present = manifest.get("files") or {}, set(_listing(root))
    problems = [f"missing file {rel}" for rel in sorted(set(listed) - present)]
    problems += [f"unlisted file {rel}" for rel in sorted(present - set(listed))]
    problems += [f"modified file {rel} (sha256 differs from the manifest)"
                 for rel in sorted(present & set(listed))
                 if sha256_file(root / rel) != listed[rel]]
    if problems:
        raise SpecPilotError(f"bundle {root} failed its integrity check: " + "; ".join(problems))
    return manifest


def open_bundle(directory: str | Path) -> Bundle:
    """Verify (see :func:`verify_bundle`) and load a bundle."""
    from specpilot.recipe import Recipe

    root = Path(directory).resolve()
    manifest = verify_bundle(root)

    def read(name: str) -> dict:
        return json.loads((root / name).read_text())

    setting = load_setting_file(root / "setting" / "setting.toml")
    if setting.name != manifest["setting"]:
        raise SpecPilotError(f"bundle {root}: setting {setting.name!r} != manifest "
                             f"{manifest['setting']!r}")
    return Bundle(root, manifest, Recipe.from_dict(read("recipe.json")), setting,
                  read("fingerprint.json"), read("validation.json"), read("bench.json"),
                  read("checkpoints.json"))


# --- a campaign's MLflow store -----------------------------------------------------------------
@dataclasses.dataclass
class Store:
    """A campaign store's MLflow client and the setting's experiment (both must exist)."""

    client: object
    tracking_uri: str
    experiment_id: str
    setting: str
    directory: Path | None
    """The store directory of a SQLite store (its ``optuna.journal`` lives there), else None."""


def open_store(setting: str, store_dir: str | None = None,
               tracking_uri: str | None = None) -> Store:
    """The records ``specpilot search SETTING`` left; never creates an empty store."""
    from specpilot.search.driver import default_store_dir
    from specpilot.search.records import check_tracking_uri
    from specpilot.search.records import experiment_name
    from specpilot.search.records import mlflow_client

    if store_dir and tracking_uri:
        raise SpecPilotError("give --store-dir or --tracking-uri, not both")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a CLI, not a notebook
    if tracking_uri is None:
        db = Path(store_dir) if store_dir else default_store_dir()
        db = db / "mlflow.db"
        if not db.is_file():
            raise SpecPilotError(f"no campaign records at {db}; run `specpilot search {setting} "
                                 "--store-dir DIR` first (or pass --store-dir/--tracking-uri)")
        tracking_uri = f"sqlite:///{db.resolve()}"
    check_tracking_uri(tracking_uri)
    client = mlflow_client(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name(setting))
    if experiment is None:
        raise SpecPilotError(f"{tracking_uri} has no experiment {experiment_name(setting)!r}; "
                             f"run `specpilot search {setting}` first")
    directory = Path(tracking_uri[len("sqlite:///"):]).parent \
        if tracking_uri.startswith("sqlite:///") else None
    return Store(client, tracking_uri, experiment.experiment_id, setting, directory)


def champion_version(store: Store, alias: str = "champion"):
    """The model version ``specpilot-<setting>@alias``."""
    from mlflow.exceptions import MlflowException

    from specpilot.search.records import model_name

    try:
        return store.client.get_model_version_by_alias(model_name(store.setting), alias)
    except MlflowException:
        raise SpecPilotError(f"no model version {model_name(store.setting)}@{alias} in "
                             f"{store.tracking_uri}") from None


def run_json(store: Store, run_id: str, artifact: str) -> dict | None:
    """A JSON artifact of a run, or None when the run has none."""
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = store.client.download_artifacts(run_id, artifact, tmp)
        except (MlflowException, OSError):
            return None
        return json.loads(Path(path).read_text())


def run_fingerprint(run) -> dict:
    """A run's stack from its ``fp.*`` tags."""
    return {k[3:]: v for k, v in run.data.tags.items() if k.startswith("fp.")}


def campaign_config(store: Store, run) -> dict | None:
    """The campaign config a run was measured under: its own ``campaign/config.json`` (retune
    runs), else its parent campaign run's."""
    own = run_json(store, run.info.run_id, "campaign/config.json")
    parent = run.data.tags.get("mlflow.parentRunId")
    if own is None and parent:
        own = run_json(store, parent, "campaign/config.json")
    return own
