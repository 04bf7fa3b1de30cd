"""Tree verification (recipe ``tree_branches`` / ``tree_positions``): greedy spec == greedy AR.

Random tiny drafters almost never agree with the target, so most runs use an *oracle* wrapper
around a real drafter (its forward and head still run): at every draft position it drafts the AR
reference's token, except at seeded positions where the reference is only its second choice
("alt", a tree can still accept there) or is not among its choices at all ("miss", acceptance
stops mid-path). That drives acceptance through alternative branches at every depth, on both
targets and both Gated-DeltaNet rollback strategies. The trained tiny pair gives natural acceptance.
"""

import random

import pytest
import torch

from specpilot import tiny
from specpilot.build import load_models
from specpilot.engines.batch import BatchEngine
from specpilot.engines.decode.tree import build_tree
from specpilot.engines.decode.tree import num_tree_paths
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.settings import load_setting
from specpilot.validation import validate_engine

PARAMS = SamplingParams(max_new_tokens=40, ignore_eos=True)
TREE = STOCK.replace(name="tree", tree_branches=2, tree_positions=3, tree_max_nodes=40)


def _oracle(monkeypatch, drafter, reference: list[int], num_prompt: int, kinds: dict[int, str]):
    """Make ``drafter`` draft ``reference`` (the AR continuation), with ``kinds[g]`` = "alt" or
    "miss" at generated index g (see the module docstring)."""
    forward, draft_logits = drafter.forward, drafter.draft_logits
    seen = {}

    def recording_forward(embeds, positions, cache):
        seen["anchor"] = int(positions[0, 0]) - num_prompt  # generated index of the anchor
        return forward(embeds, positions, cache)

    def oracle_logits(hidden, anchor, lm_head):
        _, logits = draft_logits(hidden, anchor, lm_head)
        logits = torch.zeros_like(logits)
        for j in range(logits.shape[1]):
            g = seen["anchor"] + 1 + j
            right = reference[g] if g < len(reference) else 0
            wrong, other = (right + 1) % tiny.VOCAB_SIZE, (right + 2) % tiny.VOCAB_SIZE
            kind = kinds.get(g)
            if kind is None:
                logits[0, j, right] = 12.0
            else:  # a less confident position: a wrong first choice
                logits[0, j, wrong] = 10.0
                logits[0, j, right if kind == "alt" else other] = 9.0
                if kind == "miss":
                    logits[0, j, right] = -5.0
        return logits.argmax(dim=-1), logits

    monkeypatch.setattr(drafter, "forward", recording_forward)
    monkeypatch.setattr(drafter, "draft_logits", oracle_logits)
    monkeypatch.setattr(drafter, "propose", lambda hidden, anchor, lm_head, temperature=0.0,
                        generator=None: (oracle_logits(hidden, anchor, lm_head)[0], None))


def _kinds(seed: int, length: int) -> dict[int, str]:
    rng = random.Random(seed)
    kinds = {}
    for g in range(length):
        u = rng.random()
        if u < 0.25:
            kinds[g] = "alt"
        elif u < 0.35:
            kinds[g] = "miss"
    return kinds


@pytest.fixture(scope="module")
def muse():
    return load_model(tiny.tiny_muse_target()), load_model(tiny.tiny_muse_assistant())


@pytest.fixture(scope="module")
def trained():
    return load_models(load_setting("cpu_c1_tiny"))


@pytest.mark.parametrize("drafter_name,rollback", [
    ("tiny-dflash", "snapshot"), ("tiny-dflash", "replay"),
    ("tiny-dflash2", "snapshot"), ("tiny-dflash2", "replay")])
def test_tree_equals_ar_on_the_hybrid_target(monkeypatch, tiny_models, tiny_prompts, drafter_name,
                                             rollback):
    target = tiny_models.target
    drafter = load_model(tiny.tiny_drafter(drafter_name))
    ar = Engine(target, None, AR, max_len=512)
    engine = Engine(target, drafter, TREE.replace(gdn_rollback=rollback), max_len=512)
    alternatives = 0
    for seed, prompt in enumerate(tiny_prompts[:3]):
        ref = ar.generate(prompt, PARAMS).tokens
        assert engine.generate(prompt, PARAMS).tokens == ref  # the drafter's own proposals
        with monkeypatch.context() as patch:
            _oracle(patch, drafter, ref, len(prompt), _kinds(seed, len(ref)))
            out = engine.generate(prompt, PARAMS)
        assert out.tokens == ref, f"prompt {seed}"
        assert max(out.verify_widths) > engine.block_size  # a tree, not a chain
        alternatives += sum(p > 0 for p in out.tree_paths)
    assert alternatives > 0


@pytest.mark.parametrize("rollback", ["snapshot", "replay"])
def test_tree_equals_ar_with_dspark(tiny_models, tiny_prompts, rollback):
    drafter = load_model(tiny.tiny_drafter("tiny-dspark"))
    ar = Engine(tiny_models.target, None, AR, max_len=512)
    engine = Engine(tiny_models.target, drafter, TREE.replace(gdn_rollback=rollback), max_len=512)
    prompt = tiny_prompts[3]
    assert engine.generate(prompt, PARAMS).tokens == ar.generate(prompt, PARAMS).tokens


def test_tree_equals_ar_on_muse(monkeypatch, muse, tiny_prompts):
    """Sliding-window (ring KV, window 16 = the block) and global NoPE layers under the tree mask;
    the last prompt runs the sliding layers' ring (16 + 256 slots) past its wrap."""
    target, drafter = muse
    ar = Engine(target, None, AR, max_len=512)
    engine = Engine(target, drafter, TREE.replace(tree_branches=3, tree_max_nodes=48), max_len=512)
    long_prompt = [t for p in tiny_prompts[6:12] for t in p][:250]
    alternatives = 0
    for seed, prompt in enumerate(tiny_prompts[:2] + [long_prompt]):
        ref = ar.generate(prompt, PARAMS).tokens
        assert engine.generate(prompt, PARAMS).tokens == ref
        with monkeypatch.context() as patch:
            _oracle(patch, drafter, ref, len(prompt), _kinds(10 + seed, len(ref)))
            out = engine.generate(prompt, PARAMS)
        assert out.tokens == ref, f"prompt {seed}"
        alternatives += sum(p > 0 for p in out.tree_paths)
    assert alternatives > 0


def test_accepts_through_the_alternative_branch(monkeypatch, tiny_models, tiny_prompts):
    """One position per block is wrong with the target's token second: the chain stops there, the
    tree takes the alternative and keeps going."""
    target = tiny_models.target
    drafter = load_model(tiny.tiny_drafter("tiny-dflash2"))
    prompt = tiny_prompts[4]
    ref = Engine(target, None, AR, max_len=512).generate(prompt, PARAMS).tokens
    kinds = {g: "alt" for g in range(3, len(ref), 5)}
    runs = {}
    for name, recipe in (("chain", STOCK), ("tree", TREE.replace(tree_positions=2))):
        with monkeypatch.context() as patch:
            _oracle(patch, drafter, ref, len(prompt), kinds)
            runs[name] = Engine(target, drafter, recipe, max_len=512).generate(prompt, PARAMS)
        assert runs[name].tokens == ref, name
    chain, tree = runs["chain"], runs["tree"]
    assert chain.tree_paths == [] and len(tree.tree_paths) == len(tree.accept_lengths)
    through = [n for p, n in zip(tree.tree_paths, tree.accept_lengths) if p > 0]
    assert through and all(n >= 2 for n in through)  # accepted drafts past an alternative
    assert tree.tau > chain.tau


@pytest.mark.parametrize("pad", [False, True])
def test_tree_forward_equals_each_path_alone(tiny_models, muse, tiny_prompts, pad):
    """Logits of every node equal a chain forward of its path; committing a path leaves the state a
    chain forward of it leaves (no state mixes between branches). Padded (the engine's fixed
    shapes) or not."""
    torch.manual_seed(0)
    block, num_candidates = 6, 3
    for target in (tiny_models.target, muse[0]):
        prompt = torch.tensor([tiny_prompts[5][:30]])
        candidates = torch.randint(4, tiny.VOCAB_SIZE, (block - 1, num_candidates)).tolist()
        probs = torch.rand(block - 1, num_candidates).tolist()
        start = torch.tensor([30])
        tree = build_tree(7, start, candidates, probs, num_positions=3, max_nodes=20, pad=pad)
        real = build_tree(7, start, candidates, probs, num_positions=3, max_nodes=20)
        num_real = real.paths.shape[0]
        assert 1 < num_real < num_tree_paths(3, 3, block - 1, 20) and real.num_nodes <= 20
        if pad:
            assert tree.num_nodes == 20
            assert tree.paths.shape == (num_tree_paths(3, 3, block - 1, 20), block)
        cache = target.new_cache(1, 128, "replay")
        target(prompt, torch.arange(30)[None], cache)
        view = cache.tree_view(tree)
        logits = target(tree.tokens[None], tree.positions, view, commit_all=False).logits[0]
        for p in range(tree.paths.shape[0]):
            nodes = tree.paths[p]
            chain = target.new_cache(1, 128, "replay")
            target(prompt, torch.arange(30)[None], chain)
            ref = target(tree.tokens[nodes][None], 30 + torch.arange(block)[None], chain,
                         commit_all=False).logits[0]
            torch.testing.assert_close(logits[nodes], ref, rtol=1e-4, atol=1e-4)
        path = torch.tensor([num_real - 1])  # the last real path
        nodes = tree.paths[path[0]]
        cache.keep_path(view, tree, path)
        cache.commit(torch.tensor([4]), torch.tensor([34]))
        chain = target.new_cache(1, 128, "replay")
        target(prompt, torch.arange(30)[None], chain)
        target(tree.tokens[nodes[:4]][None], 30 + torch.arange(4)[None], chain)
        after = torch.tensor([[5]]), torch.tensor([[34]])
        torch.testing.assert_close(target(*after, cache).logits, target(*after, chain).logits,
                                   rtol=1e-4, atol=1e-4)


def test_build_tree_shape_and_budget():
    candidates = [[10 + j, 20 + j, 30 + j] for j in range(7)]
    probs = [[0.9, 0.05, 0.01]] * 7
    probs[2], probs[5] = [0.4, 0.3, 0.2], [0.5, 0.45, 0.01]
    tree = build_tree(1, torch.tensor([100]), candidates, probs, 2, 14)
    paths = tree.paths.tolist()
    assert paths[0] == list(range(8))  # the first-choice chain comes first, nodes 0..7
    assert tree.tokens[paths[0][1:]].tolist() == [c[0] for c in candidates]
    assert tree.num_nodes == 12 and all(len(p) == 8 for p in paths)
    # branches only at the two least confident positions (2 and 5): the best alternative (at 5,
    # p = 0.45) fits the budget, the next ones (at 2, five new nodes each) do not, the third
    # choice at 5 (two new nodes) does
    assert [tree.tokens[p[1:]].tolist() for p in paths[1:]] == [
        [10, 11, 12, 13, 14, 25, 16], [10, 11, 12, 13, 14, 35, 16]]
    for n in range(1, tree.num_nodes):  # every node after its ancestors, one depth below its parent
        ancestors = tree.ancestors[n].nonzero()[:, 0].tolist()
        assert ancestors[-1] == n and tree.depth[ancestors].tolist() == list(range(len(ancestors)))
    padded = build_tree(1, torch.tensor([100]), candidates, probs, 2, 14, pad=True)
    assert padded.num_nodes == 14 and padded.paths.shape == (num_tree_paths(3, 2, 7, 14), 8) == (
        7, 8)
    assert torch.equal(padded.paths[:3], tree.paths) and (padded.paths[3:] == tree.paths[0]).all()
    assert torch.equal(padded.tokens[:12], tree.tokens) and padded.tokens[12:].tolist() == [1, 1]
    assert torch.equal(padded.ancestors[:12, :12], tree.ancestors)
    # a padding node sees only itself, and no node sees it
    assert torch.equal(padded.ancestors[12:], torch.eye(14, dtype=torch.bool)[12:])
    assert not padded.ancestors[:12, 12:].any()
    assert torch.equal(padded.node_path[:12], tree.node_path)


def test_trained_pair_tree_is_lossless_and_accepts_more(trained, against_ar):
    prompts = [trained.tokenizer.encode(p).ids for p in _gsm8k(6)]
    params = SamplingParams(max_new_tokens=48, ignore_eos=True)
    tree = trained.engine(STOCK.replace(name="tree", tree_branches=2, tree_positions=4,
                                        tree_max_nodes=32))
    results, tau = against_ar(trained.engine(AR), {"stock": trained.engine(STOCK), "tree": tree},
                              prompts, params)
    assert sum(p > 0 for out in results["tree"] for p in out.tree_paths) > 0  # alternatives
    assert tau["tree"] >= tau["stock"], tau


def test_token_forcing_passes_for_a_tree_recipe(trained):
    recipe = STOCK.replace(name="tree", tree_branches=3, tree_positions=2, tree_max_nodes=24,
                           gdn_rollback="replay")
    prompts = [trained.tokenizer.encode(p).ids for p in _gsm8k(4)]
    report = validate_engine(trained.engine(AR), trained.engine(recipe), prompts,
                             SamplingParams(max_new_tokens=32), num_canaries=2, name="tree")
    assert report.passed, report.failures
    assert report.num_mismatches == 0 and report.tau > 1.5


def _gsm8k(count: int) -> list[str]:
    from specpilot.datasets import load_prompts

    return load_prompts("gsm8k", count)


@pytest.mark.parametrize("changes", [
    {"tree_branches": 0}, {"tree_branches": 17}, {"tree_branches": True, "tree_positions": 1},
    {"tree_branches": "2", "tree_positions": 1}, {"tree_branches": 2},
    {"tree_positions": 2}, {"tree_branches": 2, "tree_positions": -1},
    {"tree_branches": 2, "tree_positions": 1, "tree_max_nodes": 1},
    {"tree_branches": 2, "tree_positions": 1, "tree_max_nodes": 300},
    {"tree_branches": 4, "tree_positions": 7},  # 16384 candidate paths
    {"tree_branches": 2, "tree_positions": 1, "speculative": False},
    {"tree_branches": 2, "tree_positions": 1, "draft_sampling": "sample"},
    {"tree_branches": 2, "tree_positions": 1, "verify_budget": "sps", "sps_table": [[2, 1.0]]},
    {"tree_branches": 2, "tree_positions": 8, "block_size": 8},
    {"tree_branches": 2, "tree_positions": 2, "block_size": 16, "tree_max_nodes": 12},
])
def test_bad_tree_recipes_raise(changes):
    with pytest.raises(SpecPilotError):
        Recipe.from_dict({"name": "bad", **changes})


def test_engine_refuses_what_the_drafter_cannot_hold_sampling_and_batching(tiny_models,
                                                                           tiny_prompts):
    drafter = tiny_models.drafter  # DFlash2, block 8
    for changes in ({"tree_positions": 8}, {"tree_max_nodes": 7}):
        with pytest.raises(SpecPilotError, match="tree_"):
            Engine(tiny_models.target, drafter, TREE.replace(**changes), max_len=512)
    engine = Engine(tiny_models.target, drafter, TREE, max_len=512)
    with pytest.raises(SpecPilotError, match="greedy-only"):
        engine.generate(tiny_prompts[0], SamplingParams(max_new_tokens=4, temperature=0.7))
    with pytest.raises(ValueError, match="tree verification is single-request"):
        BatchEngine(engine, max_batch=2)


def test_tree_fields_leave_other_recipes_hashes_alone():
    assert STOCK.hash() == STOCK.replace(tree_max_nodes=64).hash()
    assert TREE.hash() != STOCK.hash() != TREE.replace(tree_max_nodes=64).hash()
    assert Recipe.from_dict(TREE.to_dict()) == TREE
