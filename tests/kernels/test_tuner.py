"""The Optuna tuner end to end on CPU (interpreter, tiny shapes): wrong configs fail, never win;
the cache is keyed by the environment, and any changed fingerprint field is a miss."""

import dataclasses
import json
from pathlib import Path

import optuna
import pytest
import torch

from specpilot.kernels import skinny_gemm
from specpilot.kernels.tuning import cache
from specpilot.kernels.tuning.study import tune

from specpilot import fingerprint


def _quiet(_msg):
    pass


def _journal(directory):
    backend = optuna.storages.journal.JournalFileBackend(str(directory / "optuna.journal"))
    return optuna.storages.JournalStorage(backend)


def test_wrong_configs_are_failed_trials(kernel_cache_dir):
    # the sweep's configs valid at this shape fill the 8 trials (more stay enqueued, unrun); it
    # alternates the flag, so trials 2, 4, 6 and 8 corrupt their output whatever the sampler draws
    [result] = tune("skinny_gemm", 40, 72, [3], trials=8, device="cpu", reps=2,
                    extra_params={"_test_corrupt": [False, True]}, log=_quiet)
    study = optuna.load_study(study_name=result.study, storage=_journal(kernel_cache_dir))
    ran = [t for t in study.trials if t.state != optuna.trial.TrialState.WAITING]
    assert len(ran) == 8
    corrupt = [t for t in ran if t.user_attrs["config"].get("_test_corrupt")]
    assert len(corrupt) >= 3, "the sweep did not alternate the corrupting flag"
    for t in corrupt:
        assert t.state == optuna.trial.TrialState.FAIL and t.user_attrs["state"] == "wrong"
        assert "timing" not in t.user_attrs
    assert result.config is not None and not result.config.get("_test_corrupt")
    assert result.num_failed >= 1 and result.num_ok + result.num_failed == 8
    entry = cache.load_entry(result.cache_key, kernel_cache_dir)
    assert entry["config"] == result.config
    assert entry["p50_us"] > 0 and entry["fingerprint"]["gpu"].startswith("cpu")


def test_cache_hit_then_miss_on_changed_fingerprint(kernel_cache_dir, monkeypatch):
    # K = 256: 128-pair blocks, which most GEMV and dot K steps divide, so a few seeded trials
    # find a valid config whatever the space's size (at K = 40 only dot at 32 pairs can run)
    args = ("w12_gemm", 24, 256, [1])
    [first] = tune(*args, trials=3, device="cpu", reps=1, log=_quiet)
    assert not first.from_cache and first.config["DECODE"] == "int"
    [again] = tune(*args, trials=3, device="cpu", reps=1, log=_quiet)
    assert again.from_cache and again.config == first.config
    assert cache.lookup_config("w12_gemm", 1, 24, 256, torch.device("cpu")) == first.config

    real = fingerprint.current("cpu")
    for field in ("gpu", "compute_capability", "driver", "cuda", "torch", "triton"):
        changed = dataclasses.replace(real, **{field: getattr(real, field) + "-new"})
        monkeypatch.setattr(fingerprint, "current", lambda device="cuda", fp=changed: fp)
        assert cache.lookup_config("w12_gemm", 1, 24, 256, torch.device("cpu")) is None, field
    # a different commit is not a kernel-relevant change
    monkeypatch.setattr(fingerprint, "current",
                        lambda device="cuda": dataclasses.replace(real, commit="other"))
    assert cache.lookup_config("w12_gemm", 1, 24, 256, torch.device("cpu")) == first.config
    changed = dataclasses.replace(real, driver="999.1")
    monkeypatch.setattr(fingerprint, "current", lambda device="cuda": changed)
    [retuned] = tune(*args, trials=2, device="cpu", reps=1, log=_quiet)
    assert not retuned.from_cache and retuned.cache_key != first.cache_key


def test_linear_uses_the_cached_config(kernel_cache_dir, monkeypatch):
    chosen = {"kernel": "dot", "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 3, "num_warps": 4,
              "num_stages": 2, "PREFETCH": 0, "L2_PREFETCH": 0, "MMA_V2": 0,
              "BLOCK_T_MIN": 16}
    kernel_key = fingerprint.current("cpu").kernel_key()
    cache.store_entry(cache.entry_key("skinny_gemm", 20, 48, 4, kernel_key), {"config": chosen},
                      kernel_cache_dir)
    assert cache.lookup_config("skinny_gemm", 3, 20, 48, torch.device("cpu")) == chosen
    seen = []
    from specpilot.kernels.common import launch as impl  # where launchers plan split-K

    original = impl.splitk_plan
    monkeypatch.setattr(impl, "splitk_plan",
                        lambda k, s, b: seen.append((s, b)) or original(k, s, b))
    x = torch.randn(3, 48).to(torch.bfloat16)
    w = torch.randn(20, 48).to(torch.bfloat16)
    skinny_gemm.linear(x, w)
    assert seen == [(3, 16)]


def test_cache_file_format(kernel_cache_dir):
    path = cache.store_entry("op|N=1|K=1|M=1|k", {"config": {"a": 1}}, kernel_cache_dir)
    data = json.loads(path.read_text())
    assert data["version"] == cache.VERSION
    assert data["entries"]["op|N=1|K=1|M=1|k"]["config"] == {"a": 1}
    path.write_text(json.dumps({"version": 99, "entries": {}}))
    with pytest.raises(ValueError, match="version"):
        cache.load_entry("x", kernel_cache_dir)


def test_cli_tune_kernel(kernel_cache_dir, monkeypatch, capsys):
    from specpilot import cli

    monkeypatch.setattr(cli, "COMMANDS", {"tune-kernel": (
        "specpilot.commands.tune_kernel", "Tune one Triton kernel with Optuna.")})
    code = cli.main(["tune-kernel", "skinny_gemm", "--shape", "48,24", "--m", "1,2",
                     "--trials", "2", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split()[0] for line in out.splitlines() if line.endswith("}")
            and line.split()[0].isdigit()]
    assert rows == ["1", "2"] and "configs.json" in out, out
    for bad in (["--shape", "48"], ["--shape", "48,24", "--trial-timeout-s", "0"],
                ["--shape", "48,24", "--trial-timeout-s", "inf"]):
        with pytest.raises(SystemExit):
            cli.main(["tune-kernel", "skinny_gemm", *bad, "--device", "cpu"])
    assert "--trial-timeout-s must be a positive number" in capsys.readouterr().err


def test_configs_stored_before_a_parameter_was_added_still_run(kernel_cache_dir):
    """A GEMV config tuned before ``K_STAGES`` existed is completed with the value that runs the
    loop as it ran then, by the cache lookup and by ``tune``'s cached path (not re-tuned)."""
    old = {"kernel": "gemv", "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 1, "num_warps": 1,
           "num_stages": 1}
    kernel_key = fingerprint.current("cpu").kernel_key()
    cache.store_entry(cache.entry_key("skinny_gemm", 20, 48, 1, kernel_key), {"config": old},
                      kernel_cache_dir)
    assert cache.lookup_config("skinny_gemm", 1, 20, 48, torch.device("cpu")) == {
        **old, "K_STAGES": 1, "L2_PREFETCH": 0}
    [cached] = tune("skinny_gemm", 20, 48, [1], trials=2, device="cpu", reps=1, log=_quiet)
    assert cached.from_cache and cached.config["K_STAGES"] == 1
    # an entry no completion makes valid is tuned again
    cache.store_entry(cache.entry_key("skinny_gemm", 20, 48, 1, kernel_key),
                      {"config": {**old, "BLOCK_N": 24}}, kernel_cache_dir)
    [retuned] = tune("skinny_gemm", 20, 48, [1], trials=2, device="cpu", reps=1, log=_quiet)
    assert not retuned.from_cache
    # a W12 GEMV from before K_STAGES and ESC_EARLY runs its loop and epilogue as it did then
    old_w12 = {**old, "DECODE": "int", "ESC_CHUNK": 1}
    cache.store_entry(cache.entry_key("w12_gemm", 20, 48, 1, kernel_key), {"config": old_w12},
                      kernel_cache_dir)
    assert cache.lookup_config("w12_gemm", 1, 20, 48, torch.device("cpu")) == {
        **old_w12, "K_STAGES": 1, "ESC_EARLY": 0, "L2_PREFETCH": 0}
    # swap-AB configs from before PREFETCH and L2_PREFETCH wait for the previous kernel before any
    # load, as then, and compile to the MMA instruction Triton chose then (no MMA_V2), on a token
    # tile of at least 16
    old_dot = {"kernel": "dot", "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 1, "num_warps": 4,
               "num_stages": 2}
    for op, extra in (("skinny_gemm", {}), ("w12_gemm", {"DECODE": "int", "ESC_CHUNK": 1})):
        cache.store_entry(cache.entry_key(op, 20, 48, 4, kernel_key),
                          {"config": {**old_dot, **extra}}, kernel_cache_dir)
        added = {"BLOCK_T": 0} if op == "w12_gemm" else {}  # one token tile, as then
        assert cache.lookup_config(op, 3, 20, 48, torch.device("cpu")) == {
            **old_dot, **extra, "PREFETCH": 0, "L2_PREFETCH": 0, "MMA_V2": 0,
            "BLOCK_T_MIN": 16, **added}


def test_a_study_of_another_space_is_left_alone(kernel_cache_dir, monkeypatch):
    """Optuna refuses a categorical asked with other choices than a study stored; the study name
    carries the space's hash, so a changed space starts its own study."""
    from specpilot.kernels.skinny_gemm import space

    [first] = tune("skinny_gemm", 20, 48, [1], trials=2, device="cpu", reps=1, log=_quiet)
    monkeypatch.setitem(space.PARAMS, "gemv", {**space.PARAMS["gemv"], "num_warps": [1, 2, 4]})
    [second] = tune("skinny_gemm", 20, 48, [1], trials=2, device="cpu", reps=1, force=True,
                    log=_quiet)
    assert second.study != first.study and second.config is not None


def test_seeding_keeps_whole_sweeps_and_faster_entries(kernel_cache_dir, tmp_path):
    """A committed table seeds the cache with its winners, but not those a spent budget cut
    short, and never over a faster stored entry (a short sweep cannot undo a full one)."""
    from specpilot.kernels.tuning.seed import seed_from_results

    here = fingerprint.current("cuda").kernel_key()
    cfg = dict(skinny_gemm.space.SWEEP[0])

    def table(p50_us: float, cut_short: bool, kernel_key: str = here) -> Path:
        row = {"N": 64, "K": 32, "M": 16, "skinny_gemm": {
            "best": {"config": cfg, "timing": {"p50_us": p50_us}}, "cut_short": cut_short}}
        path = tmp_path / f"t{p50_us}-{cut_short}-{kernel_key}.json"
        path.write_text(json.dumps({"kernel_key": kernel_key, "rows": [row]}))
        return path

    key = cache.entry_key("skinny_gemm", 64, 32, skinny_gemm.space.m_bucket(16), here)
    assert seed_from_results(table(50.0, cut_short=True)) == 0
    assert cache.load_entry(key) is None
    assert seed_from_results(table(40.0, cut_short=False)) == 1
    assert seed_from_results(table(45.0, cut_short=False)) == 0  # slower than the stored 40
    assert cache.load_entry(key)["p50_us"] == 40.0
    assert seed_from_results(table(35.0, cut_short=False)) == 1
    assert cache.load_entry(key)["p50_us"] == 35.0
    assert seed_from_results(table(30.0, cut_short=False, kernel_key="another|gpu")) == 0


def test_a_hanging_config_is_killed_and_failed_and_the_study_goes_on(kernel_cache_dir):
    # The sweep alternates the flag: trial 2 launches a kernel that spins on a flag nothing sets
    # (kernels/common/test_keys.py; on a GPU, a device hang). Its process is killed after the
    # limit, the trial is FAIL "timeout" and never timed, and trial 3 gets a fresh process.
    [result] = tune("skinny_gemm", 40, 72, [3], trials=3, device="cpu", reps=1, isolate=True,
                    trial_timeout_s=8, extra_params={"_test_hang": [False, True]}, log=_quiet)
    study = optuna.load_study(study_name=result.study, storage=_journal(kernel_cache_dir))
    ran = [t for t in study.trials if t.state != optuna.trial.TrialState.WAITING]
    assert [t.user_attrs["state"] for t in ran] == ["ok", "timeout", "ok"]
    assert [t.user_attrs["config"]["_test_hang"] for t in ran] == [False, True, False]
    hung = ran[1]
    assert hung.state == optuna.trial.TrialState.FAIL and "timing" not in hung.user_attrs
    assert "killed" in hung.user_attrs["detail"]
    assert result.num_ok == 2 and result.num_failed == 1
    assert result.config is not None and not result.config["_test_hang"]
    assert result.roofline is not None  # the case's traffic came back from the child


def test_the_kernel_job_reports_a_hung_config_and_the_rest(kernel_cache_dir):
    # a campaign's kernel trials: one job, several configs; the hung one must not take the
    # others' results with it
    from specpilot.workers.evaluate import kernel

    good = {"kernel": "dot", "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 1, "num_warps": 4,
            "num_stages": 2, "PREFETCH": 0, "L2_PREFETCH": 0, "MMA_V2": 0, "BLOCK_T_MIN": 16}
    out = kernel({"op": "skinny_gemm", "m": 3, "n": 40, "k": 72, "device": "cpu", "reps": 1,
                  "isolate": True, "config_timeout_s": 8,
                  "configs": [{**good, "_test_hang": True}, {**good, "BLOCK_N": 7}, good]})
    states = [r["state"] for r in out["results"]]
    assert states == ["timeout", "invalid", "ok"], out
    assert out["results"][2]["timing"]["p50_us"] > 0 and out["traffic_bytes"] > 0


def test_a_case_that_cannot_be_built_is_a_clear_error():
    from specpilot.kernels.tuning.isolate import CaseSpec
    from specpilot.kernels.tuning.isolate import TrialProcess

    with pytest.raises(RuntimeError, match="could not build the case.*unknown kernel op"):
        with TrialProcess(CaseSpec("no_such_op", 1, 8, 8, "cpu"), reps=1, timeout_s=5) as runner:
            runner.evaluate({"kernel": "dot"})


def test_invalid_proposals_teach_the_sampler_and_never_win(kernel_cache_dir):
    # At K = 96 no sweep config of the fragment-order W12 GEMM can run M = 3, and most of the
    # space's combinations are invalid: told as FAIL, TPE never learned that and the tuner gave
    # up after 4 invalid proposals per trial with 2 of 5 configs checked. Told as COMPLETE with the
    # penalty, the sampler moves to valid ones and the whole budget is checked.
    from specpilot.kernels.tuning.study import INVALID_PENALTY_US
    from specpilot.kernels.tuning.study import checked_trials

    [result] = tune("w12f_gemm", 80, 96, [3], trials=5, device="cpu", reps=1, log=_quiet)
    assert result.num_ok + result.num_failed == 5
    study = optuna.load_study(study_name=result.study, storage=_journal(kernel_cache_dir))
    invalid = [t for t in study.trials if t.user_attrs.get("state", "").startswith("invalid")]
    assert len(invalid) == result.num_invalid > 0
    assert all(t.state == optuna.trial.TrialState.COMPLETE and t.value == INVALID_PENALTY_US
               for t in invalid)
    checked = checked_trials(study)
    assert checked and all(t.user_attrs["state"] == "ok" for t in checked)
    assert result.timing.p50_us == min(t.value for t in checked) < INVALID_PENALTY_US


def test_the_kernel_agent_sends_only_valid_configs_and_keeps_the_best_checked():
    from specpilot.kernels.tuning.ops import space_of
    from specpilot.kernels.tuning.study import INVALID_PENALTY_US
    from specpilot.search import kernel_agent as ka

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=2))
    space = space_of("w12f_gemm")
    asked = ka.ask_configs(study, space, 3, 80, 96, 4)
    assert len(asked) == 4
    for _, config in asked:
        space.validate(config, 3, 80, 96)  # raises if the worker would get an invalid config
    told = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert told and all(t.value == INVALID_PENALTY_US and t.user_attrs["state"].startswith(
        "invalid") for t in told)

    def ok(p50_us):
        return {"state": "ok", "timing": {"p20_us": p50_us, "p50_us": p50_us, "p80_us": p50_us}}

    counts = ka.tell_results(study, asked, [ok(5.0), {"state": "wrong"}, ok(3.0),
                                            {"state": "timeout"}])
    assert counts == {"ok": 2, "wrong": 1, "timeout": 1}
    entry = ka.best_entry(study, "w12f_gemm", 80, 96, 3, 4, {}, "key", 1000, 4.0)
    assert entry["p50_us"] == 3.0 and entry["config"] == asked[2][1]


def test_the_kernel_agent_surveys_the_op_each_weight_runs_on():
    # a W12 champion's packed weights are surveyed and tuned on its W12 GEMM, not the bf16 one
    from specpilot.recipe import Recipe
    from specpilot.search import kernel_agent as ka
    from specpilot.search.catalog import model_configs
    from specpilot.settings import load_setting

    target_config, _ = model_configs(load_setting("cpu_c1_tiny"))
    lm_head = (4096, 128)  # the tiny target's vocabulary x hidden size

    def ops(recipe):
        return {(n, k): op for op, n, k in ka.target_gemms(target_config, recipe)}

    bf16 = ops(Recipe(name="bf16", gemm="triton"))
    assert set(bf16.values()) == {"skinny_gemm"} and lm_head in bf16
    frag = ops(Recipe(name="frag", w12=("target",), w12_order="frag"))
    assert frag[lm_head] == "skinny_gemm"
    assert {op for shape, op in frag.items() if shape != lm_head} == {"w12f_gemm"}
    rows = ops(Recipe(name="rows", w12=("target", "lm_head")))
    assert set(rows.values()) == {"w12_gemm"}
    assert len(ka.target_gemms(target_config, Recipe(name="x"))) == ka.MAX_SURVEY_SHAPES


def test_the_kernel_survey_times_each_weight_on_its_op(kernel_cache_dir):
    from specpilot.workers.evaluate import kernel_survey

    out = kernel_survey({"device": "cpu", "m": 3, "reps": 1,
                         "gemms": [["skinny_gemm", 40, 72], ["w12f_gemm", 40, 128]]})
    assert [(r["op"], r["n"], r["k"]) for r in out["rows"]] == [("skinny_gemm", 40, 72),
                                                                ("w12f_gemm", 40, 128)]
    from specpilot.kernels.common.roofline import gemm_traffic

    w12_row = out["rows"][1]  # the packed weight's bytes (1.5 a weight + escapes), not bf16's
    assert 0 < w12_row["traffic_bytes"] < gemm_traffic(3, 40, 128, 40 * 128 * 2).bytes_moved
    assert w12_row["p50_us"] > 0
