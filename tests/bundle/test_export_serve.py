"""``specpilot export`` -> ``serve --bundle``: the same tokens, integrity and stack checks."""

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from specpilot.engines.engine import SamplingParams

from specpilot import bundle as bundles
from specpilot.datasets import load_prompts
from specpilot.errors import SpecPilotError
from specpilot.recipe import Recipe

SETTING = "cpu_c1_tiny"
NUM_TOKENS = 24
FAKE_TORCH = json.dumps({"torch": "9.9"})


def _reference_tokens(models, recipe: Recipe, prompts: list[list[int]]) -> list[list[int]]:
    engine = models.engine(recipe)
    params = SamplingParams(max_new_tokens=NUM_TOKENS, ignore_eos=True)
    return [engine.generate(ids, params).tokens for ids in prompts]


def _prompts(models) -> list[list[int]]:
    return [models.tokenizer.encode(t).ids for t in load_prompts("gsm8k", 3)]


def _served_tokens(url: str, models, prompts, expected) -> None:
    """The OpenAI client's text and /generate's ids equal the in-process engine's, prompt by
    prompt."""
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        for ids, tokens in zip(prompts, expected):
            out = client.completions.create(model=SETTING, prompt=ids, max_tokens=NUM_TOKENS,
                                            temperature=0, extra_body={"ignore_eos": True})
            assert out.usage.completion_tokens == NUM_TOKENS
            assert out.choices[0].text == models.tokenizer.decode(tokens)
    for ids, tokens in zip(prompts, expected):
        body = httpx.post(f"{url}/generate", timeout=120, json={
            "input_ids": ids, "sampling_params": {"max_new_tokens": NUM_TOKENS, "temperature": 0,
                                                  "ignore_eos": True}}).json()
        assert body["output_ids"] == tokens


def test_bundle_holds_the_champion(campaign, exported):
    manifest = bundles.verify_bundle(exported)
    assert set(manifest["files"]) == {
        "recipe.json", "fingerprint.json", "validation.json", "bench.json", "checkpoints.json",
        "kernels/configs.json", "setting/setting.toml"}
    client = campaign.client()
    version = client.get_model_version_by_alias(f"specpilot-{SETTING}", "champion")
    assert manifest["source"]["run_id"] == version.run_id
    assert manifest["source"]["model_version"] == int(version.version)
    opened = bundles.open_bundle(exported)
    champion_run = client.get_run(version.run_id)
    final = Recipe.from_json(campaign.store / "final" / f"{SETTING}.json")
    assert opened.recipe.hash() == final.hash()
    assert opened.validation["report"]["passed"] is True
    assert opened.validation["budget"]["num_prompts"] >= 1
    # validated on the champion's stack, and the tuned configs are the campaign's for that stack
    assert bundles.stack_changes(opened.fingerprint, bundles.run_fingerprint(champion_run)) == {}
    configs = json.loads((exported / "kernels" / "configs.json").read_text())["entries"]
    cache = json.loads((campaign.kernel_cache / "configs.json").read_text())["entries"]
    assert configs and all(cache[key] == entry for key, entry in configs.items())
    assert all(key.endswith(manifest["kernel_key"]) for key in configs)
    assert opened.bench["run_id"] == version.run_id and opened.bench["measurement"]
    assert {pin["kind"] for pin in opened.checkpoints.values()} == {"bundled"}
    assert opened.setting.hash() == manifest["setting_hash"]


def test_served_bundle_matches_the_engine_in_process(campaign, exported, reference_models,
                                                     bundle_server, tmp_path):
    recipe = Recipe.from_json(exported / "recipe.json")
    prompts = _prompts(reference_models)
    expected = _reference_tokens(reference_models, recipe, prompts)
    with bundle_server(campaign, exported, tmp_path / "serve.log") as url:
        info = httpx.get(f"{url}/server_info", timeout=30).json()
        assert info["engine"] == f"bundle:{recipe.name}"
        assert info["recipe_hash"] == recipe.hash()
        assert info["bundle"]["digest"] == bundles.verify_bundle(exported)["digest"]
        _served_tokens(url, reference_models, prompts, expected)


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampering_with_any_file_is_refused(exported, tmp_path):
    listed = sorted(bundles.verify_bundle(exported)["files"])
    cases = [(f"modify {rel}", rel, _flip_last_byte, f"modified file {rel}") for rel in listed]
    cases += [(f"delete {rel}", rel, Path.unlink, f"missing file {rel}") for rel in listed]
    cases += [
        ("add a file", "kernels/extra.json", lambda p: p.write_text("{}"),
         "unlisted file kernels/extra.json"),
        ("edit the manifest", "manifest.json", lambda p: p.write_text(
            p.read_text().replace('"recipe_name": "', '"recipe_name": "x')), "digest"),
        ("delete the manifest", "manifest.json", Path.unlink, "has no manifest.json"),
    ]
    for what, rel, change, message in cases:
        copy = tmp_path / what.replace(" ", "-").replace("/", "_")
        shutil.copytree(exported, copy)
        change(copy / rel)
        with pytest.raises(SpecPilotError, match=re.escape(message)):
            bundles.open_bundle(copy)


def test_serve_refuses_a_tampered_bundle(campaign, exported, cli, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(exported, copy)
    recipe = json.loads((copy / "recipe.json").read_text())
    (copy / "recipe.json").write_text(json.dumps({**recipe, "block_size": 4}))
    out = cli(campaign, "serve", "--bundle", str(copy), timeout_s=120)
    assert out.returncode == 2, out.stderr
    assert "failed its integrity check: modified file recipe.json" in out.stderr
    assert "Traceback" not in out.stderr


def test_changed_stack_is_refused_then_revalidated(campaign, exported, reference_models, cli,
                                                   bundle_server, tmp_path):
    out = cli(campaign, "serve", "--bundle", str(exported), timeout_s=120,
              SPECPILOT_FAKE_FINGERPRINT=FAKE_TORCH)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "validated on another stack (torch '" in out.stderr and "'9.9')" in out.stderr
    assert "--revalidate" in out.stderr and "Traceback" not in out.stderr

    recipe = Recipe.from_json(exported / "recipe.json")
    prompts = _prompts(reference_models)[:1]
    expected = _reference_tokens(reference_models, recipe, prompts)
    log = tmp_path / "revalidate.log"
    with bundle_server(campaign, exported, log, "--revalidate",
                       SPECPILOT_FAKE_FINGERPRINT=FAKE_TORCH) as url:
        info = httpx.get(f"{url}/server_info", timeout=30).json()
        assert info["fingerprint"]["torch"] == "9.9"
        assert info["bundle"]["stack_changes"]["torch"][1] == "9.9"
        assert info["bundle"]["revalidation"]["passed"] is True
        assert info["bundle"]["revalidation"]["num_tokens"] > 0
        _served_tokens(url, reference_models, prompts, expected)
    assert "token forcing passed" in log.read_text()


def test_bad_input_exits_2(campaign, exported, capsys, tmp_path):
    from specpilot.cli import main

    store = ["--store-dir", str(campaign.store)]
    cases = [
        (["serve"], "give SETTING ENGINE, or --bundle DIR"),
        (["serve", "--bundle", str(exported), SETTING, "stock"], "leave out ENGINE"),
        (["serve", "cpu_c1_tiny-code", "--bundle", str(exported)], "holds setting 'cpu_c1_tiny'"),
        (["serve", SETTING, "stock", "--revalidate"], "--revalidate applies to --bundle only"),
        (["serve", "--bundle", str(tmp_path / "nowhere")], "is not a directory"),
        (["export", SETTING, *store, "--out", str(exported)], "exists and is not an empty"),
        (["export", SETTING, "--store-dir", str(tmp_path), "--out", str(tmp_path / "b")],
         "no campaign records at"),
        (["export", SETTING, *store, "--out", str(tmp_path / "b"), "--run", "0123abcd"],
         "no MLflow run '0123abcd'"),
        (["export", SETTING, *store, "--out", str(tmp_path / "b"), "--alias", "nosuch"],
         "no model version specpilot-cpu_c1_tiny@nosuch"),
        (["export", SETTING, *store, "--out", str(tmp_path / "b"), "--run", "x", "--alias", "c"],
         "give --run or --alias, not both"),
        (["export", "nosuch", "--out", str(tmp_path / "b")], "unknown setting 'nosuch'"),
    ]
    client = campaign.client()
    experiment = client.get_experiment_by_name(f"specpilot/{SETTING}")
    canary = client.search_runs([experiment.experiment_id], "tags.fault = 'accept-all-drafts'")[0]
    cases.append((["export", SETTING, *store, "--out", str(tmp_path / "b"), "--run",
                   canary.info.run_id], "is 'invalid'; only a run that finished 'ok'"))
    for argv, message in cases:
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse errors
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert message in err, (argv, err)
    assert not (tmp_path / "b").exists()


def test_checkpoint_pins_catch_other_weights(exported):
    """The bundle pins each checkpoint file by content; other weights under the same source name
    are reported (``serve --bundle`` refuses them, exit 2)."""
    opened = bundles.open_bundle(exported)
    assert bundles.check_pins(opened.setting, opened.checkpoints) == []
    other = json.loads(json.dumps(opened.checkpoints))
    other["target"]["files"]["model.safetensors"] = "0" * 64
    problems = bundles.check_pins(opened.setting, other)
    assert len(problems) == 1
    assert "target checkpoint 'bundled:tiny-trained-qwen3_5': files differs" in problems[0]
    assert "model.safetensors" in problems[0]
