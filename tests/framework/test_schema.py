"""The typed result: `bench schema`, validation on write and read, schema-1 results still read, the metric registry."""

import json


def test_training_flops_are_counted_not_guessed(tmp_path, monkeypatch):
    """VGG-16 at 224x224: 15.5 G multiply-adds forward (Simonyan and Zisserman), so 31 GFLOP forward and about
    3x that for forward plus backward; the counted figure must land there, and the cache keeps that count."""
    from types import SimpleNamespace

    from bench import models

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    models._train_flops.cache_clear()
    counted = models.count_train_flops("vgg16", 224, None, 1000)
    assert 90e9 < counted < 95e9
    flops = models.model("vgg16").train_flops_per_sample(SimpleNamespace(image_size=224, seq_len=None,
                                                                         num_classes=1000))
    assert flops == counted
    (kept,) = (tmp_path / "hvdbench" / "flops").glob("*.json")
    assert json.loads(kept.read_text())["train_flops_per_sample"] == counted
    models._train_flops.cache_clear()
