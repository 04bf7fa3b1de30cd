"""``specpilot retune cpu_c1_tiny``: nothing to do on the same stack; after a (faked) torch
upgrade it re-tunes the stale kernel configs, re-validates, re-benches and records a new champion
version."""

import json

SETTING = "cpu_c1_tiny"
MODEL = f"specpilot-{SETTING}"
FAKE_TORCH = json.dumps({"torch": "9.9"})


def test_retune_after_a_stack_change(campaign, cli, tmp_path):
    copy = campaign.copy(tmp_path)
    store = ["--store-dir", str(copy.store)]
    client = copy.client()
    before = client.get_model_version_by_alias(MODEL, "champion")
    old_torch = client.get_run(before.run_id).data.tags["fp.torch"]
    stale = json.loads((copy.kernel_cache / "configs.json").read_text())["entries"]
    assert stale, "the campaign tuned no kernel config"

    same = cli(copy, "retune", SETTING, *store)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "nothing to do" in same.stdout

    out = cli(copy, "retune", SETTING, *store, "--json", str(tmp_path / "retune.json"),
              SPECPILOT_FAKE_FINGERPRINT=FAKE_TORCH)
    assert out.returncode == 10, out.stdout + out.stderr
    assert f"torch '{old_torch}' -> '9.9'" in out.stdout
    outcome = json.loads((tmp_path / "retune.json").read_text())
    assert outcome["outcome"] == "retuned" and outcome["changes"] == {"torch": [old_torch, "9.9"]}

    # every stale config of this setting's shapes was re-tuned and cached under the new stack
    kernels = outcome["kernels"]
    assert kernels["status"] == "retuned" and kernels["tuned"]
    assert {t["old_key"] for t in kernels["tuned"]} == set(stale)
    cache = json.loads((copy.kernel_cache / "configs.json").read_text())["entries"]
    for tuned in kernels["tuned"]:
        assert tuned["new_key"] == tuned["old_key"].replace(f"|{old_torch}|", "|9.9|")
        assert cache[tuned["new_key"]]["config"] == tuned["config"] and not tuned["from_cache"]
        assert tuned["num_ok"] >= 1

    # re-validated, re-benched against stock
    assert outcome["validation"]["passed"] and outcome["validation"]["num_tokens"] > 0
    compare = outcome["compare"]
    assert compare["ratios"] and compare["ci95"][0] <= compare["median_speedup"] <= \
        compare["ci95"][1]

    # recorded: a retune run with both stacks, a new version that holds the champion alias
    run = client.get_run(outcome["run_id"])
    tags = run.data.tags
    assert tags["kind"] == "retune" and tags["valid"] == "true"
    assert tags["fp.torch"] == "9.9" and tags["fp_old.torch"] == old_torch
    assert tags["previous_champion_run_id"] == before.run_id
    assert run.data.metrics["speedup_vs_stock"] == compare["median_speedup"]
    assert run.data.metrics["kernels_retuned"] == len(kernels["tuned"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"engine", "trial", "campaign", "plots"} <= artifacts
    after = client.get_model_version_by_alias(MODEL, "champion")
    assert after.run_id == run.info.run_id and int(after.version) == int(before.version) + 1
    assert after.tags["previous_version"] == str(before.version)

    # the champion now carries the new stack: nothing left to do there
    again = cli(copy, "retune", SETTING, *store, SPECPILOT_FAKE_FINGERPRINT=FAKE_TORCH)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr


def test_retune_bad_input_exits_2(capsys, tmp_path):
    from specpilot.cli import main

    cases = [(["retune", "nosuch"], "unknown setting 'nosuch'"),
             (["retune", SETTING, "--store-dir", str(tmp_path)], "no campaign records at"),
             (["retune", SETTING, "--store-dir", "a", "--tracking-uri", "sqlite:///b.db"],
              "give --store-dir or --tracking-uri, not both")]
    for argv, message in cases:
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and message in err, (argv, err)
