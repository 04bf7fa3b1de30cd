"""Bad campaign input fails at once with a clear message; a bad LLM answer is rejected and
recorded while the campaign goes on; CPU helpers see no GPU."""

import time

from tests.search.conftest import campaign_config
from tests.search.conftest import campaign_runs
from tests.search.conftest import run_search
from tests.server.conftest import start_server


def _fails_fast(args, match, **kw):
    start = time.monotonic()
    proc = run_search(args, timeout_s=120, **kw)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert match in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    return time.monotonic() - start


def test_unknown_setting_and_config_keys(tmp_path):
    _fails_fast(["no_such_setting"], "unknown setting 'no_such_setting'")
    bad = tmp_path / "bad.toml"
    bad.write_text('setting = "cpu_c1_tiny"\nround = 3\n')
    _fails_fast(["cpu_c1_tiny", "--config", str(bad)], "unknown key(s) ['round']")


def test_unreachable_ray_and_mlflow(tmp_path):
    store = ["--store-dir", str(tmp_path)]
    assert _fails_fast(["cpu_c1_tiny", "--ray-address", "127.0.0.1:9", *store],
                       "Ray cluster at 127.0.0.1:9 is unreachable") < 60
    assert _fails_fast(["cpu_c1_tiny", "--tracking-uri", "http://127.0.0.1:9", *store],
                       "MLflow tracking server http://127.0.0.1:9 is unreachable") < 60
    assert not (tmp_path / "knowledge").exists()  # nothing ran


def test_llm_agent_answer_outside_the_schema_is_recorded_and_the_campaign_goes_on(tmp_path):
    # The endpoint is a real OpenAI-compatible server (ours, serving the tiny model): its text is
    # not a JSON recipe edit, so every answer must be rejected and recorded.
    with start_server(tmp_path) as server:
        config = campaign_config(tmp_path, agents=["llm", "mutation"], proposals_per_agent=1,
                                 canary=False, llm={"url": f"{server.url}/v1",
                                                    "model": "cpu_c1_tiny", "timeout_s": 120.0})
        proc = run_search(["cpu_c1_tiny", "--config", str(config), "--store-dir",
                           str(tmp_path / "store")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "llm proposal rejected" in proc.stdout
    runs = campaign_runs(tmp_path / "store", "cpu_c1_tiny")
    rejected = [r for r in runs if r.data.tags["kind"] == "rejected"]
    assert rejected and all(r.data.tags["agent"] == "llm" for r in rejected)
    assert any(r.data.tags["kind"] == "candidate" and r.data.tags["agent"] == "mutation"
               for r in runs)


def test_cpu_helpers_see_no_gpu(ray_shutdown):
    import ray

    from specpilot.search.driver import cpu_helper_options

    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, logging_level="ERROR")

    def visible():
        import os

        context = ray.get_runtime_context()
        return os.environ.get("CUDA_VISIBLE_DEVICES"), context.get_accelerator_ids()

    devices, ids = ray.get(ray.remote(visible).options(**cpu_helper_options()).remote())
    assert devices == "" and ids.get("GPU", []) == []
