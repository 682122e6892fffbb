import math

import pytest
import torch

from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import ModelConfig, build_model, layer_names, lm_loss


def test_default_model_is_80_blocks_as_a_flat_layer_list():
    model = build_model(ModelConfig())
    assert model.config.n_layers == 80
    assert len(model.layers) == 82  # embedding + 80 blocks + head
    names = layer_names(model)
    assert names[0] == "embedding" and names[-1] == "head" and names[1] == "block 0"


def test_same_seed_same_weights_other_seed_other_weights():
    cfg = ModelConfig(n_layers=3)
    a, b, c = build_model(cfg, seed=1), build_model(cfg, seed=1), build_model(cfg, seed=2)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True))


def test_flat_layers_compose_to_the_model():
    model = build_model(ModelConfig(n_layers=4), seed=0)
    x = torch.randint(0, 64, (2, 16))
    h = x
    for layer in model.layers:
        h = layer(h)
    assert torch.equal(h, model(x))
    assert h.shape == (2, 16, 64)


def test_initial_loss_is_near_uniform_and_residual_stream_stays_sane_at_80_layers():
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=80), seed=0)
    x = torch.randint(0, 64, (2, 32))
    h = model.layers[0](x)
    start_std = h.std().item()
    for block in model.layers[1:-1]:
        h = block(h)
    # GPT-2 init scales residual projections by 1/sqrt(2L): 160 additions barely move the stream
    assert h.std().item() < 2 * start_std
    loss = lm_loss(model(x), torch.randint(0, 64, (2, 32))).item()
    assert abs(loss - math.log(64)) < 0.1


def test_causal_the_future_does_not_change_the_past():
    model = build_model(ModelConfig(n_layers=2), seed=0)
    x = torch.randint(0, 64, (1, 10))
    x2 = x.clone()
    x2[0, 7:] = (x2[0, 7:] + 1) % 64
    assert torch.allclose(model(x)[0, :7], model(x2)[0, :7])


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"n_layers": 0}, ["n_layers", "0", ">= 1"]),
        ({"d_model": 30, "n_heads": 4}, ["30", "n_heads=4", "not divisible"]),
        ({"vocab_size": 1}, ["vocab_size", "1"]),
    ],
)
def test_bad_config_names_the_value(kwargs, words):
    with pytest.raises(CourseError) as err:
        ModelConfig(**kwargs)
    for w in words:
        assert w in str(err.value)
