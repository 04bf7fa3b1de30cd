"""The training stages run end to end at toy size, honour a time budget, and save loadable pairs."""

import torch

from specpilot.engines.models import load_model
from specpilot.training import DRAFTER_CONFIG
from specpilot.training import TARGET_CONFIG
from specpilot.training import DrafterTraining
from specpilot.training import TargetTraining
from specpilot.training import greedy_continuations
from specpilot.training import save_checkpoint
from specpilot.training import train_drafter
from specpilot.training import train_target

TOY_TARGET = {**TARGET_CONFIG, "hidden_size": 32, "intermediate_size": 64,
              "num_attention_heads": 2, "linear_num_value_heads": 2}
TOY_DRAFTER = {**DRAFTER_CONFIG, "hidden_size": 32, "intermediate_size": 64,
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}


def test_toy_pair_trains_saves_and_reloads(tmp_path):
    stream = torch.randint(4, 200, (4000,), generator=torch.Generator().manual_seed(0))
    target, log = train_target(None, TargetTraining(num_steps=4, batch_size=2, seq_len=16,
                                                    warmup_steps=1), log=lambda *_: None,
                               config=TOY_TARGET, stream=stream)
    assert log["steps_done"] == 4 and log["num_tokens_seen"] == 4 * 2 * 16
    target_dir = save_checkpoint(target, TOY_TARGET, tmp_path / "target")
    reloaded = load_model(target_dir)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    layers = tuple(TOY_DRAFTER["dflash_config"]["target_layer_ids"])
    continuations = greedy_continuations(reloaded, prompts, 12, layers)
    assert [len(c.token_ids) for c in continuations] == [4 + 12, 3 + 12]
    drafter, dlog = train_drafter(reloaded, continuations,
                                  DrafterTraining(num_steps=3, sequences_per_step=2,
                                                  anchors_per_sequence=2, warmup_steps=1),
                                  log=lambda *_: None, config=TOY_DRAFTER)
    assert dlog["steps_done"] == 3
    drafter_dir = save_checkpoint(drafter, TOY_DRAFTER, tmp_path / "drafter")
    assert load_model(drafter_dir).block_size == TOY_DRAFTER["block_size"]


def test_time_budget_stops_training_early():
    stream = torch.randint(4, 200, (4000,), generator=torch.Generator().manual_seed(0))
    _, log = train_target(None, TargetTraining(num_steps=1000, batch_size=2, seq_len=16),
                          log=lambda *_: None, config=TOY_TARGET, stream=stream, budget_s=0.0)
    assert log["steps_done"] == 0


def test_stop_step_reproduces_a_budget_stop_on_the_same_schedule():
    stream = torch.randint(4, 200, (4000,), generator=torch.Generator().manual_seed(0))
    recipe = TargetTraining(num_steps=50, batch_size=2, seq_len=16, warmup_steps=1, stop_step=3)
    model, log = train_target(None, recipe, log=lambda *_: None, config=TOY_TARGET, stream=stream)
    again, _ = train_target(None, recipe, log=lambda *_: None, config=TOY_TARGET, stream=stream)
    assert log["steps_done"] == 3 and log["loss_by_step"][-1][0] == 3  # the partial window logged
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
