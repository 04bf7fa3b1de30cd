"""The token-forcing gate: stock passes, each deliberately broken engine fails."""

import json

import pytest
import torch

from specpilot import cli
from specpilot.engines.engine import SamplingParams
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.validation import validate_engine
from specpilot.validation.broken import BROKEN_ENGINES


def test_cli_validate_stock_passes(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = cli.main(["validate", "cpu_c1_tiny", "--engine", "stock", "--num-prompts", "16",
                     "--max-new-tokens", "64", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, report["failures"]
    assert report["passed"] is True
    assert report["num_prompts"] == 16 and report["num_tokens"] > 0
    for key in ("num_mismatches", "max_mismatch_gap", "mismatches"):
        assert key in report
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("kind", sorted(BROKEN_ENGINES))
def test_broken_engine_fails_cli(kind, tmp_path):
    out = tmp_path / "r.json"
    code = cli.main(["validate", "cpu_c1_tiny", "--engine", f"broken:{kind}", "--num-prompts", "4",
                     "--max-new-tokens", "32", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 1 and report["passed"] is False and report["failures"]


def test_mismatch_is_recorded_with_position_and_gap(tiny_models, tiny_prompts):
    broken = BROKEN_ENGINES["accept-all-drafts"](tiny_models.target, tiny_models.drafter, STOCK)
    report = validate_engine(tiny_models.engine(AR), broken, tiny_prompts[:2],
                             SamplingParams(max_new_tokens=24))
    first = report.mismatches[0]
    assert set(first) == {"prompt", "position", "candidate_token", "reference_token",
                          "reference_gap", "explained_by_shape"}
    assert first["candidate_token"] != first["reference_token"]
    # forcing substitutes the reference token, so every position is compared: length is intact
    assert not any("length" in f for f in report.failures)


def test_near_tie_within_epsilon_passes(tiny_models, tiny_prompts):
    """A mismatch on a near-tie (gap <= epsilon) is allowed when the rate is low."""
    broken = BROKEN_ENGINES["accept-all-drafts"](tiny_models.target, tiny_models.drafter, STOCK)
    report = validate_engine(tiny_models.engine(AR), broken, tiny_prompts[:1],
                             SamplingParams(max_new_tokens=16), epsilon=1e9, max_mismatch_rate=1.0)
    assert report.passed and report.num_mismatches > 0


@pytest.mark.parametrize("setting,num_prompts", [("cpu_c1_tiny-muse", None),
                                                 ("cpu_c1_tiny-muse-dspark", 4)])
def test_cli_validate_passes_on_muse_settings(setting, num_prompts, tmp_path):
    """On the setting's budget (16 prompts x 64 tokens, past the 16-token sliding window), or on
    fewer prompts where the same target runs with the other drafter."""
    out = tmp_path / "r.json"
    fewer = ["--num-prompts", str(num_prompts)] if num_prompts else []
    assert cli.main(["validate", setting, "--engine", "stock", "--json", str(out), *fewer]) == 0
    report = json.loads(out.read_text())
    assert report["passed"] and report["num_prompts"] == (num_prompts or 16)
    assert report["num_tokens"] > 0


def test_shape_probe_marks_mismatches_the_candidates_own_forward_makes_too(tiny_models,
                                                                         tiny_prompts):
    """A verify that rounds differently from the AR step (here: its logits nudged toward one
    token) makes the same choice when it decodes one token a step: each mismatch is marked as
    explained by the verify's shape, and the verdict still fails on them."""
    from specpilot.engines.decode.accept import greedy_accept
    from specpilot.engines.engine import Engine

    token = 7

    class Nudged(Engine):
        def _verify_fn(self, cache, draft_cache, verify_ids, positions):
            logits, _, _ = super()._verify_fn(cache, draft_cache, verify_ids, positions)
            logits = logits.clone()
            logits[..., token] += 1e4
            return (logits, *greedy_accept(verify_ids[:, 1:], logits))

    nudged = Nudged(tiny_models.target, tiny_models.drafter, STOCK, max_len=512)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    report = validate_engine(tiny_models.engine(AR), nudged, tiny_prompts[:2], params,
                             num_canaries=0)
    assert report.num_mismatches > 0 and not report.passed
    assert report.num_explained_by_shape == report.num_mismatches
    assert all(m["explained_by_shape"] and m["candidate_token"] == token
               for m in report.mismatches)
    honest = validate_engine(tiny_models.engine(AR), tiny_models.engine(STOCK), tiny_prompts[:2],
                             params)
    assert honest.passed and honest.num_explained_by_shape == 0
    skipped = validate_engine(tiny_models.engine(AR), nudged, tiny_prompts[:1], params,
                              probe_shape=False)
    assert skipped.num_explained_by_shape is None
    assert all(m["explained_by_shape"] is None for m in skipped.mismatches)


def test_cli_validate_dtype_override_runs_both_engines_in_that_dtype(tmp_path, capsys):
    """``--dtype`` loads the candidate and the reference in that dtype and records it; a bad value
    is a clear error."""
    from specpilot.bench import store

    results = tmp_path / "results"
    assert cli.main(["validate", "cpu_c1_tiny", "--engine", "stock", "--num-prompts", "2",
                     "--max-new-tokens", "8", "--dtype", "bfloat16",
                     "--results-dir", str(results)]) == 0
    [row] = store.read_table(results, kind="validate").to_pylist()
    assert json.loads(row["metrics_json"])["dtype"] == "bfloat16"  # the setting runs float32
    with pytest.raises(SystemExit) as err:
        cli.main(["validate", "cpu_c1_tiny", "--dtype", "int8"])
    assert err.value.code == 2
    assert "--dtype must be float32, bfloat16 or float16" in capsys.readouterr().err


def test_a_batch_setting_is_forced_through_the_batched_engine():
    """At a batch setting the prompts decode together, with the forcer on each request, in a pass
    per distinct verify shape of the setting's buckets (here the 4-bucket's 3-wide verify and the
    whole block below it; batched prefill): a recipe that is right passes, and one whose batched verify accepts every draft (a plain engine, so it runs
    batched) is caught, its outputs still whole."""
    from specpilot.build import load_models
    from specpilot.datasets import load_prompts
    from specpilot.settings import load_setting

    models = load_models(load_setting("cpu_c4_tiny"))
    prompts = [models.tokenizer.encode(t).ids[:20 + 4 * i]
               for i, t in enumerate(load_prompts("gsm8k", 6))]
    params = SamplingParams(max_new_tokens=24)
    recipe = STOCK.replace(name="batch", verify_widths=((4, 3),), batched_prefill=True)
    good = validate_engine(models.engine(AR), models.engine(recipe), prompts, params,
                           concurrency=4)
    assert good.passed, good.failures
    assert good.concurrency == 4 and good.num_tokens == 6 * 24 and good.tau > 1.0
    assert good.buckets == [4, 2]  # a pass per verify shape: 3 rows on the 4-bucket, 8 below it
    wrong = models.engine(recipe)
    verify_fn = wrong._verify_fn

    def accept_all(cache, draft_cache, verify_ids, positions):
        logits, _, _ = verify_fn(cache, draft_cache, verify_ids, positions)
        drafts = verify_ids.shape[1] - 1
        return (logits, torch.full((verify_ids.shape[0],), drafts, dtype=torch.long),
                logits[:, -1].argmax(dim=-1))

    wrong._verify_fn = accept_all
    bad = validate_engine(models.engine(AR), wrong, prompts, params, concurrency=4,
                          probe_shape=False)
    assert not bad.passed and bad.num_mismatches > 0 and bad.concurrency == 4
    assert not any("length" in f or "did not see" in f for f in bad.failures)
    # the deliberately broken engines subclass the engine: forced one request at a time
    broken = BROKEN_ENGINES["accept-all-drafts"](models.target, models.drafter, STOCK)
    alone = validate_engine(models.engine(AR), broken, prompts[:2], params, concurrency=4)
    assert not alone.passed and alone.concurrency == 1


def test_cli_validate_at_a_batch_setting_says_so(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main(["validate", "cpu_c4_tiny", "--engine", "stock", "--num-prompts", "5",
                     "--max-new-tokens", "16", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["concurrency"] == 4
    assert "batched on buckets [4]" in capsys.readouterr().out
