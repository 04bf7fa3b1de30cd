"""Proposal agents, campaign config, merge rule and knowledge-store priors (no Ray needed)."""

import json

import pytest

from specpilot.engine_names import recipe_for
from specpilot.errors import SpecPilotError
from specpilot.recipe import STOCK
from specpilot.search.agents import AgentContext
from specpilot.search.agents import CatalogAgent
from specpilot.search.agents import MutationAgent
from specpilot.search.agents import Proposal
from specpilot.search.agents.llm import parse_answer
from specpilot.search.catalog import Mechanism
from specpilot.search.catalog import load_catalog
from specpilot.search.catalog import resolve_delta
from specpilot.search.config import CampaignConfig
from specpilot.search.driver import merge_deltas
from specpilot.search.gaps import occupancy_widths
from specpilot.search.gaps import two_stage_table
from specpilot.search.knowledge import KnowledgeStore
from specpilot.settings import load_setting

CPU = {"gpu": "cpu", "device": "cpu", "dtype": "float32", "target": "Qwen3_5ForCausalLM",
       "hybrid": True, "drafter": "DFlash2DraftModel", "scenario": "c1", "block_size": 8}
H200 = {**CPU, "gpu": "h200", "device": "cuda", "dtype": "bfloat16"}


def context(features=CPU, champion=STOCK, gaps=(), tried=frozenset(), priors=None, round_=1,
            seed=0, limit=3, width_bounds=None):
    return AgentContext("s", features, champion, list(gaps), tried, priors or {}, round_, seed,
                        limit, width_bounds or {})


def test_catalog_entries_are_valid_recipe_deltas():
    resolved = set()
    for name in ("h200_c32_muse-glimmer-30b_dflash2", "h200_c64_muse-glimmer-30b_dflash2"):
        batch_setting = load_setting(name)
        for m in load_catalog():
            delta = resolve_delta(m, batch_setting)  # "cost-model" values for the setting
            if delta is None:  # the cost model has nothing better there
                continue
            recipe = Proposal("catalog", m.name, delta, fault=m.fault).recipe(STOCK)
            assert recipe.to_dict()  # every delta builds a valid recipe
            resolved.add(m.name)
    assert "occupancy-verify-width" in resolved


def test_occupancy_widths_come_from_the_cost_model_per_setting():
    """The catalog writes ``verify_widths = "cost-model"``; the agent proposes the numbers the cost
    model gives for the campaign's setting, and nothing where the whole block is best."""
    gaps = [{"phase": "verify", "measured_ms": 9.0, "floor_ms": 1.0}]
    name = "h200_c32_muse-glimmer-30b_dflash2"
    widths = occupancy_widths(load_setting(name))
    assert widths and all(2 <= w < 16 for _, w in widths)  # Muse + DFlash2: a 16-wide block
    assert [w for _, w in widths] == sorted((w for _, w in widths), reverse=True)
    batch_features = {**H200, "scenario": "cN", "target": "MuseGlimmerForCausalLM",
                      "hybrid": False, "block_size": 16}
    proposals = {p.mechanism: p for p in CatalogAgent().propose(AgentContext(
        name, batch_features, STOCK, gaps, frozenset(), {}, 1, 0, 20))}
    occupancy = proposals["occupancy-verify-width"]
    assert occupancy.delta == {"verify_widths": widths}
    assert occupancy.recipe(STOCK).verify_widths == widths
    # a CPU batch setting has no GPU ceilings: no widths, no proposal
    cpu = CatalogAgent().propose(AgentContext("cpu_c4_tiny", {**CPU, "scenario": "cN"}, STOCK,
                                              gaps, frozenset(), {}, 1, 0, 20))
    assert "occupancy-verify-width" not in [p.mechanism for p in cpu]
    named = recipe_for(load_setting(name), "stock+occupancy-verify-width")
    assert named.verify_widths == widths


def test_two_stage_table_and_its_measured_recipe():
    """Muse-Glimmer-30B + DFlash2 on an H200: the cost model bounds two-stage verification above
    the best single-stage width from 64 requests on (not at 32; a hybrid target never). Measured
    there it lost (0.84x), so the catalog does not offer it; the setting's recipe re-measures the
    table that was measured."""
    c64 = load_setting("h200_c64_muse-glimmer-30b_dflash2")
    table = two_stage_table(c64)
    assert table and table[0][0] == 64 and 1 <= table[0][2] < table[0][1] <= 16
    assert two_stage_table(load_setting("h200_c32_muse-glimmer-30b_dflash2")) == ()
    assert two_stage_table(load_setting("h200_c32_qwen38-27b_dflash2")) == ()
    recipe = recipe_for(c64, "occupancy-two-stage")  # the table measured (the first bound's)
    assert recipe.two_stage == ((64, 8, 3),) and recipe.stages_for(64, 16) == (8, 3)
    assert recipe.verify_widths == occupancy_widths(c64)
    assert "two-stage-verify" not in {m.name for m in load_catalog()}
    # a table that pays from some bucket on, listed where the best window or prefix changes
    bounds = {2: (0.9, 8, 3), 4: (1.1, 8, 3), 8: (1.2, 8, 3), 16: (1.3, 6, 2)}
    fake = two_stage_table(load_setting("h200_c32_muse-glimmer-30b_dflash2"), 16, lambda rows: {
        "ratio": bounds[rows][0], "two_stage_width": bounds[rows][1],
        "two_stage_prefix": bounds[rows][2]})
    assert fake == ((4, 8, 3), (16, 6, 2))
    bounds[8] = (0.95, 8, 3)  # an entry holds for every larger bucket: only the paying suffix
    assert two_stage_table(load_setting("h200_c32_muse-glimmer-30b_dflash2"), 16, lambda rows: {
        "ratio": bounds[rows][0], "two_stage_width": bounds[rows][1],
        "two_stage_prefix": bounds[rows][2]}) == ((16, 6, 2),)


def test_catalog_agent_respects_requirements_and_ranks_by_gap():
    gaps = [{"phase": "commit", "measured_ms": 6.0, "floor_ms": 1.0},
            {"phase": "verify", "measured_ms": 9.0, "floor_ms": 1.0, "predicted_ms": 8.0}]
    on_cpu = CatalogAgent().propose(context(CPU, gaps=gaps, limit=10))
    assert [p.mechanism for p in on_cpu] == ["gdn-replay-rollback"]  # cuda-only ones excluded
    on_gpu = [p.mechanism for p in CatalogAgent().propose(context(H200, gaps=gaps, limit=10))]
    # commit is 5 ms above its floor, verify only 1 ms above its calibrated prediction
    assert on_gpu[0] == "gdn-replay-rollback"
    assert "w12-target" in on_gpu and "cuda-graphs" not in on_gpu  # stock already has graphs
    assert "tree-verify" not in on_gpu  # measured slower than stock on the H200: not offered
    batched = [p.mechanism for p in CatalogAgent().propose(AgentContext(
        "cpu_c4_tiny", {**H200, "scenario": "cN"}, STOCK, gaps, frozenset(), {}, 1, 0, 10))]
    assert "w12-target" in batched


def test_requirements_match_setting_features():
    from specpilot.search.catalog import Mechanism

    one_request = Mechanism("m", {}, "verify", "t", requires={"device": "cuda", "scenario": "c1"})
    assert one_request.applies_to(H200)
    assert not one_request.applies_to({**H200, "scenario": "cN"})
    assert not one_request.applies_to(CPU)
    families = Mechanism("m", {}, "draft", "t", requires={"drafter": ["DSparkDraftModel"]})
    assert not families.applies_to(H200) and families.applies_to({**H200,
                                                                 "drafter": "DSparkDraftModel"})


def test_catalog_agent_plants_the_canary_first_in_round_one_only():
    config = CampaignConfig(setting="cpu_c1_tiny", canary=True)
    first = CatalogAgent(config).propose(context(limit=1))
    assert first[0].fault == "accept-all-drafts" and len(first) == 2
    later = CatalogAgent(config).propose(context(round_=2, limit=1))
    assert all(p.fault is None for p in later)


def test_priors_reorder_the_catalog_and_mutations():
    catalog = [Mechanism("a", {"gdn_rollback": "replay"}, "verify", ""),
               Mechanism("b", {"block_size": 4}, "commit", "")]
    gaps = [{"phase": "commit", "measured_ms": 10.0, "floor_ms": 1.0}]
    assert [p.mechanism for p in CatalogAgent(catalog=catalog).propose(
        context(gaps=gaps))] == ["b", "a"]
    assert [p.mechanism for p in CatalogAgent(catalog=catalog).propose(
        context(gaps=gaps, priors={"a": 0.3}))] == ["a", "b"]
    cold = [p.mechanism for p in MutationAgent().propose(context(limit=10))]
    warm = [p.mechanism for p in MutationAgent().propose(
        context(limit=10, priors={cold[-1]: 0.2}))]
    assert warm[0] == cold[-1] and sorted(warm) == sorted(cold)


def test_mutation_agent_is_deterministic_and_stays_in_the_window():
    a = MutationAgent().propose(context(seed=3, limit=10))
    b = MutationAgent().propose(context(seed=3, limit=10))
    assert a == b
    assert all(2 <= p.delta["block_size"] <= 8 for p in a)
    assert MutationAgent().propose(context(champion=STOCK.replace(speculative=False))) == []


def test_mutation_agent_tries_the_cost_models_best_widths_first():
    from specpilot.search.gaps import width_bounds
    from specpilot.settings import load_setting

    bounds = {4: 2.1, 6: 2.4, 7: 2.3, 2: 1.1, 3: 1.5, 5: 2.2}
    order = [p.delta["block_size"] for p in MutationAgent().propose(
        context(limit=10, width_bounds=bounds))]
    assert order == [6, 7, 4]  # the neighbours of 8 in the window, best bound first
    far = {**bounds, 3: 9.0}  # a best width that is no neighbour of 8 is proposed too
    assert [p.delta["block_size"] for p in MutationAgent().propose(
        context(limit=10, width_bounds=far))] == [3, 6, 7, 4]
    # priors (what won in similar settings) still come first
    assert MutationAgent().propose(context(limit=10, width_bounds=bounds, priors={
        "block-size-4": 0.3}))[0].delta["block_size"] == 4
    # a seed-scale setting with a replayed profile has bounds; a measured pair has none
    qwen = width_bounds(load_setting("h200_c1_qwen38-27b_dflash2"))
    assert set(qwen) == set(range(2, 9)) and max(qwen, key=qwen.get) == 8  # one request
    assert width_bounds(load_setting("cpu_c1_tiny")) == {}


def test_tried_candidates_are_not_proposed_again():
    first = MutationAgent().propose(context(limit=10))
    tried = frozenset(p.key(STOCK) for p in first[:2])
    again = MutationAgent().propose(context(limit=10, tried=tried))
    assert [p.mechanism for p in again] == [p.mechanism for p in first[2:]]


def test_llm_answers_outside_the_schema_are_rejected():
    ok, bad = parse_answer('{"proposals": [{"delta": {"block_size": 4}, "rationale": "r"}]}',
                           STOCK)
    assert ok == [{"delta": {"block_size": 4}, "rationale": "r"}] and not bad
    for answer in ['I think you should use W12.',
                   '{"proposals": [{"delta": {"turbo": true}}]}',
                   '{"proposals": [{"delta": {"name": "x"}}]}',
                   '{"proposals": [{"delta": {"speculative": false}}]}',
                   '{"proposals": [{"delta": {"block_size": 999}}]}',
                   '{"proposals": [{"delta": {"gemm": "magic"}}]}',
                   '{"proposals": [{"delta": {}, "extra": 1}]}', '{"other": []}']:
        ok, bad = parse_answer(answer, STOCK)
        assert ok == [] and bad, answer


def test_merge_takes_compatible_winners_best_first():
    a = Proposal("x", "a", {"gdn_rollback": "replay"})
    b = Proposal("x", "b", {"block_size": 4})
    c = Proposal("x", "c", {"block_size": 6})
    assert merge_deltas([(a, 1.1), (b, 1.2), (c, 1.05)]) == {"gdn_rollback": "replay",
                                                              "block_size": 4}
    assert merge_deltas([(b, 1.2), (c, 1.3)]) is None  # they conflict: nothing to merge
    canary = Proposal("x", "k", {}, fault="accept-all-drafts")
    assert merge_deltas([(a, 1.1), (canary, 9.0)]) is None


def test_w12_groups_add_up_in_merges_and_candidates():
    target = Proposal("x", "w12-target", {"w12": ["target"]})
    head = Proposal("x", "w12-lm-head", {"w12": ["lm_head"]})
    assert merge_deltas([(target, 1.1), (head, 1.2)]) == {"w12": ["lm_head", "target"]}
    champion = STOCK.with_delta({"w12": ["target"]})
    assert head.recipe(champion).w12 == ("target", "lm_head")
    assert head.recipe(champion).name == "w12-lm-head"
    assert champion.with_delta({"block_size": 4}).block_size == 4
    named = recipe_for(load_setting("cpu_c1_tiny"), "stock+w12-target+w12-lm-head")
    assert named.w12 == ("target", "lm_head")


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    with pytest.raises(SpecPilotError, match="unknown key"):
        CampaignConfig.from_dict({"setting": "cpu_c1_tiny", "roundz": 2})
    with pytest.raises(SpecPilotError, match="unknown agent"):
        CampaignConfig(setting="cpu_c1_tiny", agents=("oracle",))
    with pytest.raises(SpecPilotError, match="llm agent needs"):
        CampaignConfig(setting="cpu_c1_tiny", agents=("llm",))
    with pytest.raises(SpecPilotError, match="unknown recipe key"):
        CampaignConfig(setting="cpu_c1_tiny", start_recipe={"speed": 11})
    path = tmp_path / "c.toml"
    path.write_text('setting = "cpu_c1_tiny"\n[llm]\nurl = "http://x"\ntemperature = 1\n')
    with pytest.raises(SpecPilotError, match=r"\[llm\]: unknown key"):
        CampaignConfig.load(path)
    a = CampaignConfig(setting="cpu_c1_tiny", rounds=1)
    assert a.campaign_id() == CampaignConfig(setting="cpu_c1_tiny", rounds=5).campaign_id()
    assert a.campaign_id() != CampaignConfig(setting="cpu_c1_tiny", seed=1).campaign_id()


def test_knowledge_priors_weight_similar_settings(tmp_path):
    store = KnowledgeStore(tmp_path)
    base = {"campaign_id": "c1", "setting": "s", "round": 1, "agent": "catalog",
            "recipe_delta": "{}", "ci_low": None, "ci_high": None, "fingerprint": "{}",
            "timestamp": 0.0, **{k: CPU[k] for k in ("gpu", "target", "drafter", "scenario",
                                                     "hybrid")}}
    store.append([{**base, "mechanism": "good", "valid": True, "speedup": 1.5},
                  {**base, "mechanism": "bad", "valid": False, "speedup": None}])
    store.append([{**base, "campaign_id": "c2", "mechanism": "good", "valid": True,
                   "speedup": 1.1, "gpu": "h200", "target": "Other", "drafter": "Other",
                   "scenario": "cN", "hybrid": False}])
    priors = store.priors(CPU)
    assert priors["good"] > 0 > priors["bad"]
    assert set(store.priors(CPU, exclude_campaign="c1")) == set()  # c2 shares nothing with CPU
    assert len(store.rows()) == 3
    json.dumps(store.rows())  # plain values


def test_final_engine_is_the_last_campaigns_champion(tmp_path, monkeypatch):
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    setting = load_setting("cpu_c1_tiny")
    monkeypatch.setenv("SPECPILOT_CAMPAIGN_DIR", str(tmp_path))
    with pytest.raises(SpecPilotError, match="the search campaign writes 'final'"):
        recipe_for(setting, "final")
    (tmp_path / "final").mkdir()
    champion = STOCK.replace(name="final", block_size=6, gdn_rollback="replay")
    (tmp_path / "final" / "cpu_c1_tiny.json").write_text(json.dumps(champion.to_dict()))
    assert recipe_for(setting, "final") == champion
