"""tracr-compiled RASP programs run as TransformerLens bridges: the bridge equals tracr everywhere.

Each program is compiled once per module. On every input of its small domain (every length from
1 to max_seq_len, every token sequence), the bridge's decoded argmax equals tracr's compiled
model's decoded output, and both equal the RASP program evaluated directly.
"""

from __future__ import annotations

import pytest

from perm_circuits.discovery.tracr_models import TRACR_PROGRAMS, tracr_available

pytestmark = pytest.mark.skipif(
    not tracr_available(), reason="tracr is not installed (optional extra: pip install 'perm_circuits[tracr]')"
)


@pytest.fixture(scope="module")
def compiled():
    from perm_circuits.discovery.tracr_models import cached_tracr_model

    return cached_tracr_model  # compiled once per session, shared with the ground-truth tests


@pytest.mark.parametrize("name", ["reverse", "frac_prevs", "sort"])
@pytest.mark.slow
def test_bridge_equals_tracr_on_whole_domain(compiled, name):
    model = compiled(name)
    assert not model.bridge.training
    inputs = model.domain()  # every length, padded for tracr, one length per bridge batch
    expected = model.tracr_outputs(inputs)
    got = [out for length in range(1, model.max_seq_len + 1) for out in model.bridge_outputs(model.domain(length))]
    assert got == expected
    assert expected == [model.program(list(seq)) for seq in inputs]
    assert [len(out) for out in expected] == [len(seq) for seq in inputs]


def test_domain_sizes_and_known_outputs(compiled):
    reverse = compiled("reverse")
    assert len(reverse.domain()) == 3 + 9 + 27 + 81
    assert reverse.bridge_outputs([("a", "b", "c"), ("c", "c", "a")]) == [["c", "b", "a"], ["a", "c", "c"]]
    frac = compiled("frac_prevs")
    # fractions of "x" so far: 0, 1/2, 2/3, 1/2 -> >= 1/2 ?
    assert frac.bridge_outputs([("a", "x", "x", "b")]) == [[False, True, True, True]]
    assert frac.bridge_outputs([("x", "a", "a", "b")]) == [[True, True, False, False]]
    sort = compiled("sort")
    assert len(sort.domain()) == 4 + 12 + 24 + 24  # distinct tokens only
    assert sort.bridge_outputs([(3, 1, 4, 2)]) == [[1, 2, 3, 4]]


def test_bridge_shapes_follow_tracr_layout(compiled):
    model = compiled("reverse")
    cfg = model.bridge.cfg
    assert cfg.n_layers == model.assembled.model_config.num_layers == 4
    assert cfg.d_model == len(model.assembled.residual_labels)
    assert cfg.d_vocab_out == 3


def test_bad_input_is_refused(compiled):
    model = compiled("reverse")
    with pytest.raises(ValueError, match="vocabulary"):
        model.encode([("a", "z")])
    with pytest.raises(ValueError, match="one length"):
        model.encode([("a",), ("a", "b")])
    with pytest.raises(ValueError, match="length"):
        model.domain(9)
    from perm_circuits.discovery.tracr_models import build_tracr_model

    with pytest.raises(ValueError, match="unknown tracr program"):
        build_tracr_model("nope")
    assert set(TRACR_PROGRAMS) == {"reverse", "frac_prevs", "sort"}
