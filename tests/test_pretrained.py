"""The shipped pretrained models: complete metadata, stored metrics still reproduce, measured facts.

The facts asserted here are what *our* seed-0 models show (docs/results.md), not the study's claims.
"""

import pytest
from perm_circuits import TaskConfig, evaluate, list_pretrained, load_pretrained, make_test_set
from perm_circuits.models import PRETRAINED_DIR, load_checkpoint

NAMES = ["d16h1", "d32h1", "d32h2"]
"""The study's models (its recipe); ``d16h1l2-any`` is the general-recall model."""
ANY = "d16h1l2-any"


def test_all_presets_are_shipped():
    assert list_pretrained() == ["d16h1", "d16h1l2-any", "d32h1", "d32h2"]


def test_the_any_model_meets_its_claimed_generalisation_exhaustively(pretrained):
    """Recall >= 0.99 for EVERY repeated x_k over all 24 test permutations x 120 query orders."""
    from perm_circuits import recall_generalisation

    checkpoint = load_checkpoint(PRETRAINED_DIR / ANY)
    meta = checkpoint.metadata
    assert meta["command"].startswith("perm-circuits train --d-model 16 --heads 1 --layers 2 --repeat-sources 1,2,3,4")
    assert checkpoint.task_config == TaskConfig(repeat_ratio=0.3, repeat_sources=(1, 2, 3, 4))
    assert (checkpoint.model_config.n_layers, checkpoint.model_config.d_model, checkpoint.model_config.n_heads) == (2, 16, 1)
    assert meta["versions"]["cpu_capability"] in ("AVX512", "AVX2", "DEFAULT")
    result = recall_generalisation(pretrained(ANY), n=None)
    assert result.n_per_source == 24 * 120
    assert min(result.recall) >= 0.99 and result.elimination == 1.0
    assert result.recall[0] == 1.0 and result.recall[1] == 1.0


@pytest.mark.parametrize("name", NAMES)
def test_metadata_records_the_full_recipe(name):
    checkpoint = load_checkpoint(PRETRAINED_DIR / name)
    meta = checkpoint.metadata
    assert meta["command"].startswith(f"perm-circuits train --preset {name} --seed 0 --repeat-ratio 0.3")
    assert meta["seed"] == 0 and checkpoint.model_config.seed == 0
    recipe = meta["train_config"]
    assert (recipe["epochs"], recipe["samples_per_epoch"], recipe["batch_size"], recipe["lr"]) == (50, 100_000, 128, 1e-3)
    assert recipe["early_stop_patience"] is None and meta["epochs_run"] == 50
    assert checkpoint.task_config == TaskConfig(repeat_ratio=0.3)
    assert len(meta["history"]) == 50


@pytest.mark.parametrize("name", NAMES)
def test_stored_metrics_still_reproduce(name, pretrained):
    model = pretrained(name)
    stored = model.metadata["metrics"]
    fresh = evaluate(model, make_test_set(model.task_config, n=5000, seed=1234)).summary()
    assert set(stored) == set(fresh)
    for key, value in stored.items():
        assert fresh[key] == pytest.approx(value, abs=1e-4), key


def test_load_pretrained_returns_eval_model_with_task():
    model = load_pretrained("d32h2")
    assert not model.training and isinstance(model.metadata, dict)
    assert model.task_config.repeat_ratio == 0.3 and model.cfg.n_heads == 2
