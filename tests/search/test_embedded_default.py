"""The README's main job: ``specpilot search cpu_c1_tiny`` end to end, records read back."""

import optuna

from specpilot.search.knowledge import KnowledgeStore
from tests.search.conftest import campaign_runs
from tests.search.conftest import mlflow_client


def test_embedded_default_campaign_leaves_records(default_campaign):
    """The session's run of it (tests/default_campaign.py: its own store and kernel cache)."""
    store = default_campaign.store
    elapsed_s = default_campaign.elapsed_s
    assert elapsed_s < 600, f"embedded default took {elapsed_s:.0f} s (limit 10 minutes)"
    stdout = default_campaign.stdout
    assert "champion of cpu_c1_tiny" in stdout and "speedup over stock" in stdout
    assert default_campaign.summary["stop_reason"] in ("rounds", "exhausted", "bound_reached")

    runs = campaign_runs(store, "cpu_c1_tiny")
    by_kind = {}
    for run in runs:
        by_kind.setdefault(run.data.tags["kind"], []).append(run)
    assert by_kind.get("measure") and by_kind.get("candidate") and by_kind.get("kernel")
    # every candidate run carries the recipe, the verdict and the fingerprint
    for run in by_kind["candidate"]:
        tags = run.data.tags
        assert tags["state"] in ("ok", "invalid", "error", "crashed", "timeout")
        assert "fp.torch" in tags and "gemm" in run.data.params
        if tags["state"] == "ok":
            assert "speedup_vs_champion" in run.data.metrics
            assert "speedup_ci_low" in run.data.metrics
    # the planted broken engine was proposed, rejected by token forcing and recorded as invalid
    canary = [r for r in by_kind["candidate"] if r.data.tags.get("fault") == "accept-all-drafts"]
    assert len(canary) == 1
    assert canary[0].data.tags["state"] == "invalid" and canary[0].data.tags["valid"] == "false"
    assert canary[0].info.status == "FINISHED"

    # champion alias exists and is never the canary
    client = mlflow_client(store)
    version = client.get_model_version_by_alias("specpilot-cpu_c1_tiny", "champion")
    assert version.run_id != canary[0].info.run_id
    champion_run = client.get_run(version.run_id)
    assert champion_run.data.tags.get("fault") is None

    # Optuna kernel trials in the journal: some checked and timed, none left RUNNING (queued
    # known-good configs not yet asked stay WAITING)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(store / "optuna.journal")))
    studies = optuna.get_all_study_names(storage)
    assert studies and all(":skinny_gemm:" in name for name in studies)
    trials = [t for name in studies
              for t in optuna.load_study(study_name=name, storage=storage).trials]
    states = {t.state for t in trials}
    assert any(t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("state") == "ok"
               for t in trials)
    assert optuna.trial.TrialState.RUNNING not in states

    # knowledge-store rows for every verdict of a real mechanism (not the canary)
    rows = KnowledgeStore(store / "knowledge").rows()
    verdicts = [r for r in by_kind["candidate"] if r.data.tags["state"] in ("ok", "invalid")
                and not r.data.tags.get("fault")]
    assert len(rows) == len(verdicts) and all(r["setting"] == "cpu_c1_tiny" for r in rows)
    assert {r["mechanism"] for r in rows} == {r.data.tags["mechanism"] for r in verdicts}
