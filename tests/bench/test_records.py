"""Publishing records: a token-forcing report becomes a stored ``validate`` record."""

import json

from specpilot.engines.engine import SamplingParams

from specpilot.bench import publish
from specpilot.bench import store
from specpilot.bench import validation_record
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.validation import validate_engine


def test_validation_record_is_stored(tiny_models, tiny_prompts, tmp_path):
    report = validate_engine(tiny_models.engine(AR), tiny_models.engine(STOCK), tiny_prompts[:1],
                             SamplingParams(max_new_tokens=8), name="stock")
    record = publish(validation_record(report, tiny_models.setting, "stock", STOCK), tmp_path,
                     json_path=tmp_path / "validate.json")
    assert record["passed"] is True and record["report"]["num_tokens"] == 8
    assert record["plots"] == []  # no plot fits a validate record
    [row] = store.read_table(tmp_path, kind="validate").to_pylist()
    assert (row["passed"], row["recipe_hash"], row["engine"]) == (True, STOCK.hash(), "stock")
    written = {k: v for k, v in record.items() if k != "store_path"}
    assert store.read(tmp_path) == [json.loads(json.dumps(written))]  # tuples come back as lists
    assert (tmp_path / "validate.json").is_file()
