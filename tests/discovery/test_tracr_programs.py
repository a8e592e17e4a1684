"""Any RASP program of tracr's own library (none the benchmark uses) through one call.

``tracr_program`` compiles it, loads the bridge (output label: the program's own), builds its
ground truths and its batch; the bridge equals tracr on the whole domain; the functional truth is
checked by intervention (every edge changes the metric, the truth alone keeps faithfulness >= 0.99);
EAP, EAP-IG, ACDC and greedy rank the functional truth with ROC AUC >= 0.95 under zero and resample
ablation.  ``make_length`` is given a batch of every length 1-4 in one padded batch (its output is
the length: one length per batch leaves resample ablation nothing to explain): it gets the same
checks there, under zero and resample ablation.  Each program is compiled once per session (tracr
compiles in seconds).
"""

from __future__ import annotations

import functools

import pytest

from perm_circuits.discovery.tracr_models import tracr_available

pytestmark = pytest.mark.skipif(
    not tracr_available(), reason="tracr is not installed (optional extra: pip install 'perm_circuits[tracr]')"
)


def _programs():
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return {
        "hist": (lambda: lib.make_hist(), ("a", "b", "c"), 4),
        "sort": (lambda: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=4, min_key=1), (1, 2, 3), 4),
        "length": (lambda: lib.make_length(), ("a", "b", "c"), 4),
    }


LENGTHS = {"length": range(1, 5)}  # the whole domain in one padded batch


@functools.lru_cache(maxsize=None)
def compiled(name: str):
    from perm_circuits.discovery.ground_truth import tracr_program

    make, vocab, n = _programs()[name]
    return tracr_program(make(), vocab, n, name=name, lengths=LENGTHS.get(name))


@functools.lru_cache(maxsize=None)
def prepared(name: str, how: str, full_length: bool = False):
    """The program's intervention on its batch (``full_length``: on every input of length 4 only)."""
    from perm_circuits.discovery import prepare_edges

    program = compiled(name)
    return prepare_edges(program.bridge, program.model.batch() if full_length else program.batch, how=how)


@functools.lru_cache(maxsize=None)
def checked(name: str, how: str):
    """The functional truth of the program's structural truth on its batch and mode."""
    from perm_circuits.discovery.ground_truth import functional_truth

    return functional_truth(prepared(name, how), compiled(name).truths[how])


@pytest.mark.parametrize("name", ["hist", "sort", "length"])
def test_bridge_equals_tracr_on_whole_domain(name):
    """Every input of every length 1-4: the bridge (one unpadded run per length) equals tracr (one padded
    run) and the RASP program itself."""
    model = compiled(name).model
    assert not model.bridge.training
    inputs = model.domain()
    assert {len(s) for s in inputs} == {1, 2, 3, 4}
    assert model.bridge_outputs(inputs) == model.tracr_outputs(inputs) == [model.program(list(s)) for s in inputs]


def test_one_program_has_three_layers():
    assert compiled("sort").bridge.cfg.n_layers >= 3


def test_batch_is_the_whole_domain_of_full_length_scored_by_tracr():
    program = compiled("hist")
    batch = program.batch
    assert tuple(batch.tokens.shape) == (3**4, 5)
    assert batch.mask[:, 0].sum() == 0 and bool((batch.mask[:, 1:] == 1).all())
    decode = {i: v for v, i in program.model.assembled.output_encoder.encoding_map.items()}
    assert [decode[int(t)] for t in batch.targets[0, 1:]] == [4, 4, 4, 4]  # "aaaa": each token seen 4 times


def test_output_label_is_passed_and_checked():
    from tracr.compiler import lib

    from perm_circuits.discovery.tracr_models import compile_tracr, tracr_to_bridge

    model = compiled("hist").model
    with pytest.raises(ValueError, match="not a label"):
        tracr_to_bridge(model.assembled, "no_such_label")
    with pytest.raises(TypeError, match="RASP expression"):
        compile_tracr("hist", ("a",), 2)
    with pytest.raises(ValueError, match="vocab"):
        compile_tracr(lib.make_hist(), (), 2)


@pytest.mark.parametrize("how", ["zero", "resample"])
@pytest.mark.parametrize("name", ["hist", "sort"])
def test_functional_truth_checked_by_intervention(name, how):
    truth = checked(name, how)
    assert truth.edges and truth.checked and truth.faithfulness >= 0.99
    assert min(truth.effects.values()) >= 1e-3
    assert truth.edges | truth.idle == compiled(name).truths[how].edges


def test_length_is_idle_on_full_length_inputs():
    """make_length on inputs of one length: resample has nothing to explain; zero's length head is idle."""
    from perm_circuits.discovery import METHODS
    from perm_circuits.discovery.ground_truth import functional_truth, tracr_ground_truths

    zero_truth, resample_truth = tracr_ground_truths(compiled("length").model)
    ei = prepared("length", "resample", full_length=True)
    assert ei.nothing_to_explain
    assert functional_truth(ei, resample_truth).edges == frozenset()
    for method in ("eap", "acdc", "greedy_edges"):
        result = METHODS[method](intervention=ei)
        assert result.nothing_to_explain and result.circuit == frozenset()
    zero = functional_truth(prepared("length", "zero", full_length=True), zero_truth)
    assert {"embed->L0H0.q", "embed->L0H0.k"} <= zero.idle and zero.checked


def test_mixed_lengths_batch_is_the_whole_domain_padded():
    """One batch of every length 1-4, right-padded: the edge forward with every edge kept predicts
    tracr's output at every scored position, and under resample ablation across lengths the length
    has something to explain (with one length it has nothing)."""
    program = compiled("length")
    batch = program.batch
    lengths = batch.extras["lengths"]
    assert tuple(batch.tokens.shape) == (3 + 9 + 27 + 81, 5)
    assert [int((lengths == n + 1).sum()) for n in range(1, 5)] == [3, 9, 27, 81]
    assert float(batch.mask.sum()) == 3 * 1 + 9 * 2 + 27 * 3 + 81 * 4  # every real position but BOS
    for how in ("zero", "mean", "resample"):
        ei = prepared("length", how)
        scored = batch.mask > 0
        assert bool((ei.run(ei.ones()).argmax(-1)[scored] == batch.targets[scored]).all())
        assert not ei.nothing_to_explain
    assert program.truths["resample"].edges == program.truths["zero"].edges  # mixed lengths: every composition


@pytest.mark.parametrize("how", ["zero", "resample"])
def test_mixed_lengths_functional_truth_checked_by_intervention(how):
    truth = checked("length", how)
    assert truth.checked and truth.faithfulness >= 0.99 and min(truth.effects.values()) >= 1e-3
    assert {"L0H0->L0MLP", "L0MLP->logits"} <= truth.edges  # the length head feeds the read-out MLP
    # zero: the selector reads nothing that varies (q, k idle); resample across lengths: the source's pad
    # tokens reach q and k, and the value input carries nothing that differs
    idle = {"embed->L0H0.q", "embed->L0H0.k"} if how == "zero" else {"embed->L0H0.v", "embed->L0MLP"}
    assert truth.idle == idle


@pytest.mark.parametrize("how", ["zero", "resample"])
@pytest.mark.parametrize("name", ["hist", "sort", "length"])
@pytest.mark.parametrize("method", ["eap", "eap_ig", "acdc", "greedy_edges"])
def test_methods_rank_the_functional_truth(name, how, method):
    from perm_circuits.discovery import METHODS
    from perm_circuits.discovery.scoring import roc_auc

    ei = prepared(name, how)
    truth = checked(name, how)
    result = METHODS[method](intervention=ei)
    assert roc_auc({e: float(v) for e, v in result.scores.items()}, truth.edges) >= 0.95
