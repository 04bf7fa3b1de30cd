"""A second setting warm-started from the knowledge store finds the first setting's winner sooner.

Setting A (``cpu_c1_tiny``, gsm8k) and B (``cpu_c1_tiny-code``, mbpp) share the trained tiny pair.
Both campaigns start from a handicapped recipe (verify block 2 of the drafter's 8: at most one
draft token per step); on a pair with real acceptance (tau > 4) a wider block wins. A's campaign
evaluates every block-size mutation and writes its verdicts to the knowledge store. B then gets a
budget of one trial: warm (priors on), that trial is A's best winner; cold (priors off, same
seed), the agent's own order puts A's winner later, so one trial does not reach it. (Whether it
also wins on B is B's business: mbpp is out of the pair's gsm8k domain, and the campaign measures
it rather than assuming it.)
"""

from specpilot.recipe import STOCK
from specpilot.search.agents import AgentContext
from specpilot.search.agents import MutationAgent
from specpilot.search.catalog import setting_features
from specpilot.search.knowledge import KnowledgeStore
from specpilot.settings import load_setting
from tests.search.conftest import campaign_config
from tests.search.conftest import run_search

START = {"block_size": 2}


def _campaign(tmp_path, name, setting, knowledge, **overrides):
    d = tmp_path / name
    d.mkdir()
    config = campaign_config(d, agents=["mutation"], canary=False, start_recipe=START,
                             knowledge_dir=str(knowledge), **overrides)
    proc = run_search([setting, "--config", str(config), "--store-dir", str(d / "store"),
                       "--json", str(d / "summary.json")])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    return json.loads((d / "summary.json").read_text())


def test_warm_start_finds_the_first_settings_winner_in_fewer_trials(tmp_path):
    knowledge = tmp_path / "knowledge"
    _campaign(tmp_path, "a", "cpu_c1_tiny", knowledge, proposals_per_agent=6)
    rows = KnowledgeStore(knowledge).rows()
    winners = [r for r in rows if r["valid"] and r["ci_low"] is not None and r["ci_low"] > 1.01]
    assert winners, f"no mechanism won on setting A: {rows}"
    features = setting_features(load_setting("cpu_c1_tiny-code"))
    # A's best for B as the priors rank it (mean log speedup over A's trials of a mechanism, which
    # a mechanism tried in two rounds averages): it must be one of A's winners
    priors = KnowledgeStore(knowledge).priors(features)
    best = max(priors, key=priors.get)
    assert best in {r["mechanism"] for r in winners}, (best, priors, winners)

    start = STOCK.replace(name="start", **START)

    def cold_order(seed):
        context = AgentContext("cpu_c1_tiny-code", features, start, [], frozenset(), {}, 1, seed,
                               10)
        return [p.mechanism for p in MutationAgent().propose(context)]

    seed = next(s for s in range(20) if cold_order(s)[0] != best)
    cold_trials_needed = cold_order(seed).index(best) + 1
    assert cold_trials_needed > 1

    # a budget of one trial, with a short A/B: B's runs check which trial ran, not its speed
    single = dict(proposals_per_agent=1, num_workers=1, compare_budget_s=2.0,
                  compare_max_rounds=2)
    cold = _campaign(tmp_path, "b-cold", "cpu_c1_tiny-code", knowledge, priors=False, seed=seed,
                     **single)
    warm = _campaign(tmp_path, "b-warm", "cpu_c1_tiny-code", knowledge, priors=True, seed=seed,
                     **single)
    assert warm["proposed"][0]["mechanisms"] == [best]
    assert cold["proposed"][0]["mechanisms"] != [best]
    evaluated = {name: [e["mechanism"] for e in run["evaluated"] if e["kind"] == "candidate"]
                 for name, run in (("warm", warm), ("cold", cold))}
    assert evaluated["warm"] == [best]  # found in 1 trial, and measured (a verdict recorded)
    assert best not in evaluated["cold"]  # the cold start needs cold_trials_needed > 1 trials
