"""``specpilot search SETTING``: run (or resume) a search campaign and print its champion.

The campaign config comes from ``--config`` (TOML or JSON), else the setting's own
``campaign.toml``, else the defaults; flags override single keys. The same command is the Ray job
entrypoint (``python -m specpilot.search SETTING``): inside ``ray job submit`` it joins that
cluster; otherwise it starts a local one (logical GPUs for CPU settings).
"""

import dataclasses
import json
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    config: Annotated[str | None, "campaign config (TOML/JSON); default: the setting's "
                      "campaign.toml"] = None
    rounds: Annotated[int | None, "rounds (a larger value continues a finished campaign)"] = None
    workers: Annotated[int | None, "GPU workers (one per GPU)"] = None
    time_budget_s: Annotated[float | None, "no new round after this many seconds"] = None
    ray_address: Annotated[str | None, "join this Ray cluster (default: $RAY_ADDRESS, else a "
                           "local one)"] = None
    tracking_uri: Annotated[str | None, "MLflow tracking URI (default: sqlite in the store "
                            "directory)"] = None
    store_dir: Annotated[str | None, "where MLflow, Optuna and the knowledge store live "
                         "(default: $SPECPILOT_HOME/campaigns)"] = None
    seed: Annotated[int | None, "campaign seed"] = None
    json: Annotated[str | None, "write the campaign summary as JSON to this path"] = None

    def __post_init__(self):
        for name in ("rounds", "workers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1")


def load_config(args: Args):
    from specpilot.search.config import CampaignConfig
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    overrides = {"setting": args.setting, "rounds": args.rounds, "num_workers": args.workers,
                 "time_budget_s": args.time_budget_s, "ray_address": args.ray_address,
                 "tracking_uri": args.tracking_uri, "campaign_dir": args.store_dir,
                 "seed": args.seed}
    path = args.config or (setting.directory / "campaign.toml")
    if args.config or path.is_file():
        return CampaignConfig.load(path, **overrides)
    return CampaignConfig.from_dict({k: v for k, v in overrides.items() if v is not None})


def run(args: Args) -> int:
    from specpilot.search.driver import Campaign

    config = load_config(args)
    summary = Campaign(config).run()
    champion = summary["champion"]
    print(f"champion of {summary['setting']}: {champion['name']}")
    delta = {k: v for k, v in champion.items() if k != "name"}
    print(f"  recipe: {json.dumps(delta, sort_keys=True)}")
    ci = summary.get("speedup_vs_stock_ci")
    if ci:
        print(f"  speedup over stock: {summary['speedup_vs_stock']:.3f}x, 95% CI "
              f"[{ci[0]:.3f}, {ci[1]:.3f}] (interleaved A/B, token forcing passed)")
    elif summary.get("speedup_vs_stock") == 1.0:
        print(f"  speedup over stock: 1.000x ({summary.get('final_note', 'champion is stock')})")
    else:
        print(f"  speedup over stock: not measured ({summary.get('final_note')})")
    print(f"  stopped by: {summary['stop_reason']}; {summary['trials_run']} trials run")
    print(f"  records: MLflow {summary['tracking_uri']} (experiment {summary['experiment']}, "
          f"model alias specpilot-{summary['setting']}@champion); store {summary['store_dir']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2, default=str)
    return 0
