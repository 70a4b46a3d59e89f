"""The CoNLL-2002 BiLSTM + chain tagger (tasks/conll_net.py): vocabularies and encoding, the network's chain
potentials against ChainCRF, the timed split backward against one backward, determinism, bad input. Small
synthetic corpora; the real-data run is marked slow."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchcrf")

from _shared_data import needs_data  # noqa: E402

import structopt as so  # noqa: E402
from structopt.errors import InvalidInputError  # noqa: E402
from structopt.tasks import conll_net as cn  # noqa: E402
from structopt.tasks.conll import Corpus  # noqa: E402
from structopt.torch import structured_loss  # noqa: E402


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread: on a busy 2-core machine torch's thread pool costs more than it gives."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


WORDS = ["el", "la", "de", "en", "Madrid", "Juan", "Pérez", "EFE", "1992", "presidente", "dijo", "que", ",", "."]
TAGS = {"Madrid": "B-LOC", "Juan": "B-PER", "Pérez": "I-PER", "EFE": "B-ORG"}


def corpus(n: int, seed: int, source: str = "synthetic") -> Corpus:
    """``n`` random sentences; names are tagged, Pérez after Juan is I-PER (a transition to learn)."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    tags: list[str] = []
    lengths = rng.integers(1, 12, n)
    for length in lengths:
        for _ in range(length):
            w = WORDS[rng.integers(len(WORDS))]
            words.append(w)
            tag = TAGS.get(w, "O")
            if w == "Pérez" and (len(tags) == 0 or tags[-1] not in ("B-PER", "I-PER")):
                tag = "B-PER"
            tags.append(tag)
    return Corpus(words, None, tags, lengths.astype(np.int64), source)


def small_net(vocab: cn.Vocabulary, loss: str = "crf", seed: int = 0) -> cn.BiLSTMTagger:
    torch.manual_seed(seed)
    options = cn.NetOptions(loss=loss, hidden=8, word_dim=8)
    return cn.BiLSTMTagger(**{**options.network_args(vocab), "extra_dim": 4}, char_dim=5, char_hidden=4)


def test_vocabulary_encoding_and_json_round_trip():
    train = Corpus(["Madrid", "madrid", "1992", "Otorrinolaringología", "la"], None,
                   ["B-LOC", "B-LOC", "O", "O", "O"], np.array([3, 2]), "t")
    vocab = cn.Vocabulary.build(train, max_chars=8)
    assert vocab.tags == ["O", "B-LOC"]
    assert vocab.words[:2] == ["<pad>", "<unk>"] and "0000" in vocab.words and "madrid" in vocab.words
    # "madrid" occurs twice (lowercased), the others once
    assert sorted(vocab.words[i] for i in vocab.singletons) == ["0000", "la", "otorrinolaringología"]
    X = cn.encode(train, vocab)
    assert [x.shape for x in X] == [(3, 5 + 8), (2, 5 + 8)]
    assert (np.concatenate(X)[:, 4] == 1).all()  # no POS table: the POS column is <unk>
    assert X[0][0, 0] == X[0][1, 0] == vocab.words.index("madrid")
    assert X[0][0, 1] == vocab.shapes.index("Xxx") and X[0][1, 1] == vocab.shapes.index("xx")
    chars = vocab.lookup("chars")
    # a long word keeps its first and last max_chars / 2 characters
    assert X[1][0, 5:].tolist() == [chars[c] for c in "Otorgía"[:4] + "ogía"]
    assert X[0][0, 5:].tolist() == [chars[c] for c in "Madrid"] + [0, 0]
    test = Corpus(["Zaragoza", "1993"], None, ["B-LOC", "O"], np.array([2]), "u")
    (x,) = cn.encode(test, vocab)
    assert x[0, 0] == 1 and x[1, 0] == vocab.words.index("0000")  # unseen word → <unk>; digits → 0
    assert x[0, 5] == 1  # an unseen character
    again = cn.Vocabulary.from_json(vocab.to_json())
    assert again.to_json() == vocab.to_json()
    assert all(np.array_equal(a, b) for a, b in zip(cn.encode(train, again), X))


def test_pos_inputs():
    train = Corpus(["Juan", "vive", "en", "Madrid"], ["NP", "VM", "SP", "NP"], ["B-PER", "O", "O", "B-LOC"],
                   np.array([4]), "t")
    vocab = cn.Vocabulary.build(train, use_pos=True)
    assert vocab.uses_pos and vocab.pos == ["<pad>", "<unk>", "NP", "SP", "VM"]
    (x,) = cn.encode(Corpus(["Ana", "en"], ["NP", "Fc"], [], np.array([2]), "u"), vocab)
    assert x[:, 4].tolist() == [vocab.pos.index("NP"), 1]
    net = small_net(vocab)
    assert net.use_pos and net.pos.num_embeddings == 5
    with pytest.raises(InvalidInputError, match="u: the model reads POS tags"):
        cn.encode(Corpus(["Ana"], None, [], np.array([1]), "u"), vocab)
    with pytest.raises(InvalidInputError, match="no POS column"):
        cn.Vocabulary.build(Corpus(["Ana"], None, ["O"], np.array([1]), "v"), use_pos=True)
    assert not cn.Vocabulary.build(train).uses_pos


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("tags"), "expected the keys"),
    (lambda d: d.update(words=["a", "b"]), "must start with"),
    (lambda d: d.update(chars=[*d["chars"], d["chars"][-1]]), "repeated"),
    (lambda d: d.update(singletons=[10**6]), "singletons"),
    (lambda d: d.update(max_chars="20"), "max_chars"),
    (lambda d: d.update(shapes=[1, 2]), "list of strings"),
])
def test_vocabulary_from_bad_json_is_refused(change, match):
    data = cn.Vocabulary.build(corpus(5, 0)).to_json()
    change(data)
    with pytest.raises(InvalidInputError, match=match):
        cn.Vocabulary.from_json(data)


def test_unseen_tag_is_refused_naming_the_file():
    vocab = cn.Vocabulary.build(corpus(5, 0))
    bad = Corpus(["x"], None, ["B-MISC"], np.array([1]), "esp.testb")
    with pytest.raises(InvalidInputError, match=r"esp\.testb.*B-MISC"):
        cn.encode_tags(bad, vocab)


@pytest.mark.parametrize("loss", ["crf", "torchcrf"])
def test_potentials_fold_the_boundary_scores_into_a_plain_chain(loss):
    """A Chain on the network's potentials is the CRF: the same log-likelihood and the same Viterbi tags."""
    train = corpus(12, 1)
    vocab = cn.Vocabulary.build(train)
    net = small_net(vocab, loss).double()
    with torch.no_grad():  # boundary scores far from zero, so that a wrong fold shows
        for p in net.chain_scores():
            p.copy_(torch.randn(p.shape, dtype=p.dtype))
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    net.eval()
    tokens, lengths, tags = cn.pad(X, Y)
    emissions = net.emissions(tokens, lengths)
    theta = net.potentials(emissions, lengths)
    assert [t.unary.shape for t in theta] == [(len(x), len(vocab.tags)) for x in X]
    ours = structured_loss(so.Chain(len(vocab.tags)), theta, Y, kind="crf")
    if loss == "crf":
        reference = net.crf(emissions, tags, lengths=lengths)
    else:
        mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        reference = -net.crf(emissions, tags, mask=mask, reduction="none")
    np.testing.assert_allclose(ours.detach().numpy(), reference.detach().numpy(), rtol=1e-9)
    chain = so.Chain(len(vocab.tags))
    viterbi = net.decode(emissions, lengths)
    for t, y in zip(theta, viterbi):
        np.testing.assert_array_equal(chain.argmax(so.ChainPotentials(t.unary.detach().numpy(),
                                                                      t.pairwise.detach().numpy())), y)
    # the per-example forward gives the same potentials as the batch
    one = net(X[3])
    np.testing.assert_allclose(one.unary.detach().numpy(), theta[3].unary.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("loss", ["crf", "hinge", "sparsemap", "torchcrf"])
def test_timed_step_gives_the_gradients_of_one_backward(loss):
    """The training step splits the backward at the emissions to time the chain's loss: same gradients."""
    train = corpus(10, 2)
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    options = cn.NetOptions(loss=loss, unk_rate=0.0, dropout=0.0, clip=1e9, hidden=8, word_dim=8)
    net = small_net(vocab, loss).double().eval()  # no dropout: both passes see the same network
    with torch.no_grad():
        for p in net.chain_scores():
            p.copy_(torch.randn(p.shape, dtype=p.dtype))

    class Keep(torch.optim.SGD):  # records the gradients instead of stepping
        def step(self, closure=None):
            self.seen = [p.grad.clone() for p in net.parameters()]

    keep = Keep(net.parameters(), lr=0.1)
    clock = cn._Clock()
    value = cn._step(net, keep, X, Y, options, torch.zeros(0, dtype=torch.int64), torch.Generator(), clock)
    assert clock.structured > 0
    net.zero_grad()
    tokens, lengths, tags = cn.pad(X, Y)
    emissions = net.emissions(tokens, lengths)
    whole = cn._structured_loss(net, emissions, lengths, tags, Y, options) / len(X)
    whole.backward()
    assert value == pytest.approx(float(whole.detach()), rel=1e-10)
    for (name, p), g in zip(net.named_parameters(), keep.seen):
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-7, atol=1e-10, err_msg=name)
    if loss != "crf" and loss != "torchcrf":
        assert float(whole.detach()) >= 0  # hinge and Fenchel-Young losses are non-negative


def test_sparsemap_stopped_at_max_iter_is_counted_not_warned_per_sentence(recwarn):
    train = corpus(8, 8)
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    net = small_net(vocab, "sparsemap")
    optimiser = torch.optim.Adam(net.parameters())
    clock = cn._Clock()
    few = cn.NetOptions(loss="sparsemap", sparsemap_max_iter=1, hidden=8, word_dim=8)
    cn._step(net, optimiser, X, Y, few, torch.zeros(0, dtype=torch.int64), torch.Generator(), clock)
    long = sum(len(x) > 1 for x in X)
    assert 0 < clock.truncated <= len(X) and long > 0
    assert not [w for w in recwarn if "SparseMAP" in str(w.message)]
    clock = cn._Clock()
    enough = cn.NetOptions(loss="sparsemap", sparsemap_max_iter=1000, hidden=8, word_dim=8)
    cn._step(net, optimiser, X, Y, enough, torch.zeros(0, dtype=torch.int64), torch.Generator(), clock)
    assert clock.truncated == 0


@pytest.mark.parametrize("loss", ["crf", "hinge", "sparsemap", "torchcrf"])
def test_a_batch_of_one_token_sentences_trains(loss):
    """No transition is scored in such a batch (pytorch-crf's transitions are then outside the graph)."""
    train = Corpus(["Juan", "vive", "Madrid"], None, ["B-PER", "O", "B-LOC"], np.array([1, 1, 1]), "t")
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    net = small_net(vocab, loss)
    options = cn.NetOptions(loss=loss, hidden=8, word_dim=8)
    optimiser = torch.optim.Adam(net.parameters())
    before = net.chain_scores()[0].detach().clone()
    cn._step(net, optimiser, X, Y, options, torch.zeros(0, dtype=torch.int64), torch.Generator(), cn._Clock())
    assert torch.equal(net.chain_scores()[0].detach(), before)  # transitions: zero gradient, Adam leaves them


def test_fit_is_seeded_and_learns_the_synthetic_names():
    train, dev = corpus(80, 3), corpus(30, 4)
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    D = (cn.encode(dev, vocab), cn.encode_tags(dev, vocab))
    options = cn.NetOptions(epochs=4, batch_size=8, lr=2e-2, hidden=8, word_dim=8, dropout=0.0, unk_rate=0.0)
    weights = []
    for _ in range(2):
        net = small_net(vocab)
        info = cn.fit(net, vocab, X, Y, options, dev=D)
        weights.append(torch.cat([p.detach().ravel() for p in net.parameters()]))
    assert torch.equal(weights[0], weights[1])
    assert info["epochs"] == 4 and len(info["dev_f1"]) == 4 and 0 < info["structured_share"] < 1
    assert max(info["dev_f1"]) > 0.9  # names are tagged by their word; Pérez's tag depends on the previous one
    assert info["dev_f1"][info["best_epoch"] - 1] == max(info["dev_f1"])
    assert cn.evaluate(net, *D, vocab.tags) == pytest.approx(max(info["dev_f1"]))


def test_torch_model_predicts_the_networks_viterbi_tags():
    """The declared network as a TorchModel: its predict_batch (a Chain's argmax on the module's potentials)
    gives fit's Viterbi tags; its weights are the module's parameters."""
    train = corpus(20, 5)
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    options = cn.NetOptions(epochs=1, batch_size=8, hidden=8, word_dim=8)
    model = cn.build_model(vocab, options)
    assert model.network == cn.NETWORK and isinstance(model.module, cn.BiLSTMTagger)
    cn.fit(model.module, vocab, X, Y, options)
    assert not model.module.training
    w = model.get_weights()
    assert w.size == sum(p.numel() for p in model.module.parameters())
    predicted = model.predict_batch(X, w)
    for a, b in zip(predicted, cn.predict_tags(model.module, X)):
        np.testing.assert_array_equal(a, b)
    again = cn.build_model(vocab, options)  # the same seed builds the same initial network
    assert not np.array_equal(again.get_weights(), w)
    again.set_weights(w)
    for a, b in zip(again.predict_batch(X, w), predicted):
        np.testing.assert_array_equal(a, b)


def test_saved_model_round_trip_predicts_the_same_tags(tmp_path):
    """so.save_model / so.load_model keep the network (declared name, JSON args, state_dict arrays) and the
    vocabulary (JSON): the reloaded model reads a corpus and predicts the trained network's tags."""
    train, new = corpus(30, 6), corpus(15, 7)
    vocab = cn.Vocabulary.build(train)
    options = cn.NetOptions(epochs=1, batch_size=8, hidden=8, word_dim=8)
    model = cn.build_model(vocab, options)
    cn.fit(model.module, vocab, cn.encode(train, vocab), cn.encode_tags(train, vocab), options)
    w = model.get_weights()
    so.save_model(tmp_path / "model.npz", model, w, task="ner", preprocessing={"vocabulary": vocab.to_json()})
    saved = so.load_model(tmp_path / "model.npz")
    again = cn.Vocabulary.from_json(saved.preprocessing["vocabulary"])
    X = cn.encode(new, again)
    for a, b in zip(saved.predict(X), cn.predict_tags(model.module, cn.encode(new, vocab))):
        np.testing.assert_array_equal(a, b)


def test_predict_inputs_of_a_network_model_run_on_one_torch_thread(tmp_path):
    """The CLI's predict reads inputs with NERTask.read_inputs, then runs the network sentence by sentence: one
    torch thread (with the pool, esp.testb took 278 s on a busy machine, 9 s on one thread)."""
    from structopt.cli_tasks import NERTask

    train = corpus(10, 9)
    vocab = cn.Vocabulary.build(train)
    model = cn.build_model(vocab, cn.NetOptions(hidden=8, word_dim=8))
    so.save_model(tmp_path / "model.npz", model, model.get_weights(), task="ner",
                  preprocessing={"tags": vocab.tags, "vocabulary": vocab.to_json()})
    saved = so.load_model(tmp_path / "model.npz")
    NERTask().check_preprocessing(saved)
    (tmp_path / "in.txt").write_text("Juan B-PER\nvive O\n\nMadrid B-LOC\n", encoding="utf-8")
    torch.set_num_threads(2)
    inputs = NERTask().read_inputs(saved, tmp_path / "in.txt")
    assert torch.get_num_threads() == 1
    assert [x.shape[0] for x in inputs.X] == [2, 1] and inputs.gold == [["B-PER", "O"], ["B-LOC"]]
    assert len(saved.predict(inputs.X)) == 2


def test_bad_options_and_inputs_are_refused():
    with pytest.raises(InvalidInputError, match="loss must be one of"):
        cn.NetOptions(loss="svm")
    with pytest.raises(InvalidInputError, match="epochs"):
        cn.NetOptions(epochs=0)
    with pytest.raises(InvalidInputError, match="unk_rate"):
        cn.NetOptions(unk_rate=1.0)
    with pytest.raises(InvalidInputError, match="empty batch"):
        cn.pad([])
    with pytest.raises(InvalidInputError, match="sentence 1 of the batch is empty"):
        cn.pad([np.zeros((2, 7), np.int64), np.zeros((0, 7), np.int64)])
    with pytest.raises(InvalidInputError, match="sentence 1 of the batch must be an integer array"):
        cn.pad([np.zeros((2, 7), np.int64), np.zeros((2, 7))])
    with pytest.raises(InvalidInputError, match="sentence 0 of the batch must be an integer array"):
        cn.pad([np.zeros(7, np.int64)])
    vocab = cn.Vocabulary.build(corpus(5, 0))
    x = cn.encode(corpus(1, 0), vocab)[0]
    net = small_net(vocab)
    for column, name in ((0, "word"), (2, "prefix"), (6, "character")):
        bad = x.copy()
        bad[0, column] = 10**5
        with pytest.raises(InvalidInputError, match=f"{name} ids must be in"):
            net(bad)
    with pytest.raises(InvalidInputError, match="as many tag sequences"):
        cn.fit(small_net(vocab), vocab, [np.zeros((2, 24), np.int64)], [], cn.NetOptions())


@pytest.mark.slow
@needs_data("conll2002")
def test_cli_train_net_then_predict_gives_the_same_f1(tmp_path, capsys):
    from structopt.cli import main

    out = tmp_path / "run"
    args = ["train", "ner", "--net", "bilstm", "--n-train", "40", "--epochs", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    trained = capsys.readouterr().out
    assert "chunk" not in trained
    f1 = trained.split("test entity f1 ")[1].split()[0]
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "testb.conll")]) == 0
    assert capsys.readouterr().out.split("test entity f1 ")[1].split()[0] == f1
    lines = (tmp_path / "testb.conll").read_text(encoding="utf-8").splitlines()
    assert lines[0].split()[:2] == ["La", "DA"] and len(lines[0].split()) == 4  # word POS gold predicted
    # a file without its POS column: the model reads POS tags
    bad = tmp_path / "nopos.txt"
    bad.write_text("Juan\nvive\n", encoding="utf-8")
    assert main(["predict", str(out / "model.npz"), str(bad), "--out", str(tmp_path / "x.conll")]) == 2
    assert "word POS [tag]" in capsys.readouterr().err  # read_tokens: the model uses POS inputs


@pytest.mark.slow
@needs_data("conll2002")
def test_short_real_run_reads_the_split_and_scores_testb():
    out = cn.train_tagger(cn.NetOptions(epochs=1, hidden=16, word_dim=16), n_train=200)
    info = out["info"]
    assert info["epochs"] == 1 and 0 <= info["test_f1"] <= 1 and len(info["dev_f1"]) == 1
    assert out["vocab"].tags[0] == "O" and len(out["vocab"].tags) == 9
    assert out["files"]["test"].endswith("esp.testb")


def test_fit_interrupted_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path):
    """Dropout, unknown-word draws, the batch plan and the best development epoch's weights all survive a
    simulated Ctrl-C in the middle of epoch 2: the resumed run ends bit for bit where the uninterrupted one does."""
    from structopt.net_checkpoint import NetCheckpoint
    from structopt.progress import Progress

    class StopAt(Progress):
        def items(self, iterable, total, what, unit="it"):
            for i, item in enumerate(iterable):
                if what.startswith("epoch 2/") and i == 2:
                    raise KeyboardInterrupt
                yield item

    train, dev = corpus(40, 3), corpus(12, 4)
    vocab = cn.Vocabulary.build(train)
    X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
    D = (cn.encode(dev, vocab), cn.encode_tags(dev, vocab))
    options = cn.NetOptions(epochs=3, batch_size=8, lr=2e-2, hidden=8, word_dim=8, dropout=0.3, unk_rate=0.5)
    reference = small_net(vocab)
    expected = cn.fit(reference, vocab, X, Y, options, dev=D)
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        cn.fit(small_net(vocab), vocab, X, Y, options, dev=D, progress=StopAt(lines=False, bars=False),
               checkpoint=NetCheckpoint(path))
    net = small_net(vocab)
    info = cn.fit(net, vocab, X, Y, options, dev=D, checkpoint=NetCheckpoint(path, resume=True))
    assert info["resumed"] and info["losses"] == expected["losses"] and info["dev_f1"] == expected["dev_f1"]
    assert info["best_epoch"] == expected["best_epoch"]
    for (name, a), b in zip(reference.state_dict().items(), net.state_dict().values()):
        assert torch.equal(a, b), name
