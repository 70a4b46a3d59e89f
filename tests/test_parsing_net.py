"""The BiLSTM arc scorer for Turkish parsing (tasks/parsing_net.py): vocabularies and encoding, the arc table's
convention (DependencyTree's potentials, root = 0) and the labelled potentials' argmax, both losses against
brute-force enumeration of the trees (n <= 4) and the network's gradients against finite differences, seeded
training on a synthetic treebank, the CLI's train -> predict round trip and bad input. Small synthetic data
only; skipped without torch."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from structopt.cli import main  # noqa: E402
from structopt.errors import InvalidInputError  # noqa: E402
from structopt.structures.dependency import DependencyPotentials, DependencyTree  # noqa: E402
from structopt.tasks import parsing_net as pn  # noqa: E402
from structopt.tasks.parsing import read_conllu  # noqa: E402
from structopt.torch import TorchModel  # noqa: E402


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread: on a busy 2-core machine torch's thread pool costs more than it gives."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def treebank(rng: np.random.Generator, n_sentences: int, lo: int = 2, hi: int = 7) -> str:
    """CoNLL-U sentences whose heads follow their tags: the first word (a VERB) is the root, a VERB hangs from the
    previous VERB (conj), a NOUN from the next VERB if there is one, else the previous one (obj), a final PUNCT
    from the root (p)."""
    blocks = []
    for _ in range(n_sentences):
        n = int(rng.integers(lo, hi))
        tags = ["VERB"] + [str(t) for t in rng.choice(["NOUN", "VERB"], size=n - 1)] + ["PUNCT"]
        verbs = [i + 1 for i, t in enumerate(tags) if t == "VERB"]
        lines = []
        for i, t in enumerate(tags, start=1):
            if i == 1:
                head, label = 0, "root"
            elif t == "VERB":
                head, label = max(v for v in verbs if v < i), "conj"
            elif t == "PUNCT":
                head, label = 1, "p"
            else:
                later = [v for v in verbs if v > i]
                head, label = (min(later), "obj") if later else (max(v for v in verbs if v < i), "advmod")
            form = "." if t == "PUNCT" else f"{'Ev' if t == 'NOUN' else 'gel'}{'ler' * (i % 3)}"
            lines.append(f"{i}\t{form}\t_\t{t}\t{t[:2]}\t_\t{head}\t{label}\t_\t_")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def sentences(tmp_path: Path, n: int, seed: int = 0) -> list:
    path = tmp_path / f"s{seed}.conllu"
    path.write_text(treebank(np.random.default_rng(seed), n), encoding="utf-8")
    return read_conllu(path)


def tiny_options(**changes) -> pn.NetOptions:
    return pn.NetOptions(**{"word_dim": 6, "tag_dim": 3, "hidden": 5, "layers": 1, "arc_hidden": 4,
                            "label_hidden": 4, "dropout": 0.0, **changes})


def tiny_model(vocab: pn.Vocabulary, seed: int = 0, **changes) -> TorchModel:
    return pn.build_model(vocab, tiny_options(seed=seed, **changes), dtype=torch.float64)


# --------------------------------------------------------------------------- vocabulary and encoding
def test_vocabulary_encoding_and_json_round_trip(tmp_path):
    train = sentences(tmp_path, 6)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    assert vocab.words[:3] == ["<pad>", "<unk>", "<root>"] and vocab.upos == ["<pad>", "<unk>", "<root>", "NOUN",
                                                                                 "PUNCT", "VERB"]
    assert sum(vocab.counts) == sum(len(s.words) for s in train) and vocab.counts[:3] == [0, 0, 0]
    X = pn.encode(train, vocab)
    assert [x.shape for x in X] == [(len(s.words), 4) for s in train] and all(x.dtype == np.int64 for x in X)
    assert all(int(x.min()) >= 3 for x in X)  # every training value is known
    again = pn.Vocabulary.from_json(vocab.to_json())
    assert again == vocab
    # lower-cased forms (the first word of every sentence is "geller"); an unseen word and tags read as unknown
    # (id 1), a known suffix stays known
    other = read_conllu(_write(tmp_path, "1\tGELLER\t_\tVERB\tVE\t_\t0\troot\t_\t_\n"
                                         "2\tKitapler\t_\tADJ\tJJ\t_\t1\tobj\t_\t_\n"))
    (x,) = pn.encode(other, vocab)
    assert x[0].tolist() == [vocab.words.index("geller"), vocab.upos.index("VERB"), vocab.xpos.index("VE"),
                             vocab.suffixes.index("ler")]
    assert x[1].tolist() == [1, 1, 1, vocab.suffixes.index("ler")]
    Y = pn.gold_outputs(train, vocab)
    assert all(y.shape == (2, len(s.words)) for y, s in zip(Y, train))


def _write(tmp_path: Path, text: str, name: str = "other.conllu") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("counts"), "expected the keys"),
    (lambda d: d.update(words=["<pad>", "<unk>", "x"]), "must start with"),
    (lambda d: d.update(upos=[*d["upos"], "NOUN"]), "repeated"),
    (lambda d: d.update(counts=d["counts"][:-1]), "one int >= 0 per word"),
    (lambda d: d.update(labels=[]), "no relation labels"),
    (lambda d: d.update(xpos=[1, 2]), "list of strings"),
])
def test_vocabulary_from_bad_json_is_refused(tmp_path, change, match):
    data = pn.Vocabulary.build(sentences(tmp_path, 4), ["conj", "obj", "root"]).to_json()
    change(data)
    with pytest.raises(InvalidInputError, match=match):
        pn.Vocabulary.from_json(data)


# --------------------------------------------------------------------------- the arc table and the potentials
def test_arc_table_convention_and_labelled_argmax(tmp_path):
    train = sentences(tmp_path, 8)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    model = tiny_model(vocab)
    net = model.module
    X = pn.encode(train, vocab)
    x = X[0]
    n, L = x.shape[0], len(vocab.labels)
    with torch.no_grad():
        theta = net(torch.from_numpy(x))
        tokens, lengths = pn.pad([x])
        v = net.encode(tokens, lengths)[0]
        arcs = net.arc_scores(v[None], lengths)[0]
    assert isinstance(theta, DependencyPotentials) and theta.arcs.shape == (n + 1, n + 1, L)
    assert arcs.shape == (n + 1, n + 1)
    # arcs[h, m] is head h -> dependent m (root = 0), the MLP of v_h as head and v_m as dependent
    for h, m in [(0, 1), (1, 2), (2, 1), (n, 1)]:
        with torch.no_grad():
            by_hand = net.arc_out(torch.tanh(net.arc_head(v[h]) + net.arc_dep(v[m])))[0]
        assert float(arcs[h, m]) == pytest.approx(float(by_hand), abs=1e-12)
    assert not np.any(arcs[:, 0].numpy()) and not np.any(np.diag(arcs.numpy()))  # unused entries are 0
    assert np.any(arcs[1:, 1:].numpy())
    # the labelled table's best label adds 0: its max over labels is the arc table (to rounding: another pass)
    np.testing.assert_allclose(theta.arcs.max(dim=2).values.numpy(), arcs.numpy(), rtol=0, atol=1e-12)
    # the labelled argmax is the single-root tree of the arc scores alone, each arc with the classifier's best label
    for x in X:
        with torch.no_grad():
            tokens, lengths = pn.pad([x])
            v = net.encode(tokens, lengths)
            arcs = net.arc_scores(v, lengths)[0].numpy()
            label_table = net.label_table(v)[0].numpy()
        y = model.predict(x, model.get_weights())
        heads = DependencyTree().argmax(DependencyPotentials(arcs))
        assert np.array_equal(y[0], heads) and int(np.sum(heads == 0)) == 1
        assert np.array_equal(y[1], label_table[heads, np.arange(1, len(heads) + 1)].argmax(axis=1))


def test_forward_batch_equals_forward_per_sentence(tmp_path):
    train = sentences(tmp_path, 12)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    model = tiny_model(vocab)
    X = pn.encode(train, vocab)
    with torch.no_grad():
        batch = model.module.forward_batch([torch.from_numpy(x) for x in X], chunk=5)  # padding, chunks, order
        for x, theta in zip(X, batch):
            alone = model.module(torch.from_numpy(x))
            assert theta.arcs.shape == alone.arcs.shape
            np.testing.assert_allclose(theta.arcs.numpy(), alone.arcs.numpy(), atol=1e-12)
    w = model.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(model.predict_batch(X, w), [model.predict(x, w) for x in X]))


# --------------------------------------------------------------------------- the losses
def _trees(n: int) -> np.ndarray:
    """Every single-root tree of n words (head arrays), by brute force."""
    out = []
    for heads in itertools.product(range(n + 1), repeat=n):
        if sum(h == 0 for h in heads) != 1 or any(h == m + 1 for m, h in enumerate(heads)):
            continue
        ok = True
        for m in range(1, n + 1):  # follow the heads: the root within n steps
            node, steps = m, 0
            while node != 0 and steps <= n:
                node, steps = heads[node - 1], steps + 1
            ok &= node == 0
        if ok:
            out.append(heads)
    return np.array(out, dtype=np.int64)


def test_tree_enumeration_counts():
    # single-root trees of n words: n^(n-1) (rooted trees on n labelled nodes, Cayley)
    assert [len(_trees(n)) for n in (1, 2, 3, 4)] == [1, 2, 9, 64]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_losses_and_gradients_against_enumeration(n):
    rng = np.random.default_rng(n)
    trees = _trees(n)
    columns = np.arange(1, n + 1)
    for _ in range(5):
        table = rng.normal(scale=2.0, size=(n + 1, n + 1))
        gold = trees[rng.integers(len(trees))]
        scores = table[trees, columns].sum(axis=1)
        indicators = np.zeros((len(trees), n + 1, n + 1))
        indicators[np.arange(len(trees))[:, None], trees, columns] = 1.0
        gold_mu = np.zeros((n + 1, n + 1))
        gold_mu[gold, columns] = 1.0
        # CRF: log sum_y exp s(y) - s(gold); gradient E[mu] - mu(gold)
        t = torch.tensor(table, requires_grad=True)
        (value,) = pn.arc_loss([t], [gold], "crf")
        value.backward()
        log_z = np.logaddexp.reduce(scores)
        p = np.exp(scores - log_z)
        assert float(value.detach()) == pytest.approx(log_z - table[gold, columns].sum(), abs=1e-10)
        np.testing.assert_allclose(t.grad.numpy(), np.einsum("k,kij->ij", p, indicators) - gold_mu, atol=1e-10)
        # hinge: max_y s(y) + #wrong heads - s(gold); gradient mu(best) - mu(gold)
        t = torch.tensor(table, requires_grad=True)
        (value,) = pn.arc_loss([t], [gold], "hinge")
        value.backward()
        augmented = scores + (trees != gold).sum(axis=1)
        best = int(np.argmax(augmented))
        assert float(value.detach()) == pytest.approx(augmented[best] - table[gold, columns].sum(), abs=1e-10)
        np.testing.assert_allclose(t.grad.numpy(), indicators[best] - gold_mu, atol=1e-12)


@pytest.mark.parametrize("kind", pn.LOSSES)
def test_network_gradients_against_finite_differences(tmp_path, kind):
    """The loss of :func:`fit` (structured loss of the arc tables + label cross-entropy) differentiated through the
    whole network (float64), against central differences along random directions of the parameters."""
    train = sentences(tmp_path, 3, seed=4)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    model = tiny_model(vocab, seed=2)
    net = model.module
    X, Y = pn.encode(train, vocab), pn.gold_outputs(train, vocab)

    def loss() -> torch.Tensor:
        tokens, lengths = pn.pad(X)
        v = net.encode(tokens, lengths)
        tables = net.arc_scores(v, lengths)
        heads = torch.zeros(tokens.shape[:2], dtype=torch.int64)
        relations = torch.full(tokens.shape[:2], -100, dtype=torch.int64)
        for b, y in enumerate(Y):
            heads[b, :y.shape[1]], relations[b, :y.shape[1]] = torch.from_numpy(y[0]), torch.from_numpy(y[1])
        structured = pn.arc_loss([tables[b, :n + 1, :n + 1] for b, n in enumerate(lengths.tolist())],
                                 [y[0] for y in Y], kind).sum()
        logits = net.label_scores(v, heads).reshape(-1, len(vocab.labels))
        return structured + torch.nn.functional.cross_entropy(logits, relations.reshape(-1), reduction="sum")

    net.zero_grad()
    loss().backward()
    grad = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).numpy()
    w = model.get_weights()
    rng = np.random.default_rng(0)
    eps = 1e-6
    for _ in range(3):
        d = rng.normal(size=w.size)
        d /= np.linalg.norm(d)
        values = []
        for sign in (1, -1):
            model.set_weights(w + sign * eps * d)
            with torch.no_grad():
                values.append(float(loss()))
        model.set_weights(w)
        assert (values[0] - values[1]) / (2 * eps) == pytest.approx(grad @ d, rel=1e-5, abs=1e-7)


def test_split_backward_gives_the_gradients_of_one_backward(tmp_path):
    """_step times the structured loss apart (a detached leaf, then the network's backward): the same step as one
    backward of the whole loss."""
    train = sentences(tmp_path, 6, seed=5)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    X, Y = pn.encode(train, vocab), pn.gold_outputs(train, vocab)
    options = tiny_options(loss="crf", word_dropout=0.0)
    models = [tiny_model(vocab, seed=3) for _ in range(2)]
    sgd = [torch.optim.SGD(m.module.parameters(), lr=0.1) for m in models]
    pn._step(models[0].module, sgd[0], X, Y, options, torch.ones(len(vocab.words)), torch.Generator(), pn._Clock())
    net = models[1].module
    tokens, lengths = pn.pad(X)
    v = net.encode(tokens, lengths)
    tables = net.arc_scores(v, lengths)
    heads = torch.zeros(tokens.shape[:2], dtype=torch.int64)
    relations = torch.full(tokens.shape[:2], -100, dtype=torch.int64)
    for b, y in enumerate(Y):
        heads[b, :y.shape[1]], relations[b, :y.shape[1]] = torch.from_numpy(y[0]), torch.from_numpy(y[1])
    total = pn.arc_loss([tables[b, :n + 1, :n + 1] for b, n in enumerate(lengths.tolist())], [y[0] for y in Y],
                        "crf").sum() + torch.nn.functional.cross_entropy(
        net.label_scores(v, heads).reshape(-1, len(vocab.labels)), relations.reshape(-1), reduction="sum")
    sgd[1].zero_grad()
    (total / len(X)).backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), options.clip)
    sgd[1].step()
    np.testing.assert_allclose(models[0].get_weights(), models[1].get_weights(), atol=1e-12)


# --------------------------------------------------------------------------- training
def test_fit_is_seeded_and_learns_the_synthetic_treebank(tmp_path):
    train, dev = sentences(tmp_path, 60, seed=1), sentences(tmp_path, 20, seed=2)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    X, Y = pn.encode(train, vocab), pn.gold_outputs(train, vocab)
    options = tiny_options(loss="hinge", epochs=10, batch_size=8, lr=0.02, hidden=8, arc_hidden=8)
    runs = []
    for _ in range(2):
        model = pn.build_model(vocab, options)
        info = pn.fit(model, vocab, X, Y, options, dev=(dev, pn.encode(dev, vocab)))
        runs.append(model.get_weights())
    assert np.array_equal(runs[0], runs[1])  # seeded: the same weights
    assert info["epochs"] == 10 and len(info["dev_uas"]) == 10 and 0 < info["structured_share"] < 1
    assert info["dev_uas"][info["best_epoch"] - 1] == max(info["dev_uas"]) >= 0.9  # the tag rule is learnt
    assert not model.module.training


@pytest.mark.parametrize("loss", ["hinge", "crf"])
def test_fit_interrupted_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path, loss):
    """Dropout, word dropout, the batch plan and the best development epoch's weights survive a simulated Ctrl-C
    in the middle of epoch 2: the resumed run ends bit for bit where the uninterrupted one does."""
    from structopt.net_checkpoint import NetCheckpoint
    from structopt.progress import Progress

    class StopAt(Progress):
        def items(self, iterable, total, what, unit="it"):
            for i, item in enumerate(iterable):
                if what.startswith("epoch 2/") and i == 1:
                    raise KeyboardInterrupt
                yield item

    train, dev = sentences(tmp_path, 24, seed=1), sentences(tmp_path, 8, seed=2)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    X, Y, D = pn.encode(train, vocab), pn.gold_outputs(train, vocab), (dev, pn.encode(dev, vocab))
    options = tiny_options(loss=loss, epochs=3, batch_size=8, lr=0.02, dropout=0.3)
    reference = pn.build_model(vocab, options)
    expected = pn.fit(reference, vocab, X, Y, options, dev=D)
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        pn.fit(pn.build_model(vocab, options), vocab, X, Y, options, dev=D, progress=StopAt(lines=False, bars=False),
               checkpoint=NetCheckpoint(path))
    model = pn.build_model(vocab, options)
    info = pn.fit(model, vocab, X, Y, options, dev=D, checkpoint=NetCheckpoint(path, resume=True))
    assert info["resumed"] and not expected["resumed"]
    assert info["losses"] == expected["losses"] and info["dev_uas"] == expected["dev_uas"]
    assert info["best_epoch"] == expected["best_epoch"]
    assert np.array_equal(model.get_weights(), reference.get_weights())


# --------------------------------------------------------------------------- the CLI
def _data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    rng = np.random.default_rng(7)
    for name in ("web.conllu", "wiki.conllu"):
        (folder / name).write_text(treebank(rng, 30), encoding="utf-8")
    return folder


@pytest.mark.parametrize("loss", [pytest.param(loss, marks=pytest.mark.slow) if loss != "hinge" else loss
                                  for loss in pn.LOSSES])
def test_cli_train_net_then_predict_prints_the_same_scores(tmp_path, capsys, loss):
    data = _data(tmp_path)
    out = tmp_path / "run"
    n_train = 20 if loss == "hinge" else 1000  # beyond the 48 training sentences: all, with a warning
    assert main(["train", "parsing", "--net", "bilstm", "--loss", loss, "--data", str(data), "--n-train", str(n_train),
                 "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    trained, err = capsys.readouterr()
    assert ("exceeds the 48 training sentences" in err) == (n_train > 48)
    assert f"n={min(n_train, 48)}" in err
    uas, las = trained.split("test uas ")[1].split()[0], trained.split("test las ")[1].split()[0]
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "test.conllu")]) == 0
    scored = capsys.readouterr().out
    assert scored.split("test uas ")[1].split()[0] == uas and scored.split("test las ")[1].split()[0] == las
    predicted = read_conllu(tmp_path / "test.conllu")
    assert len(predicted) == 6  # sentences 9, 19, 29 of each file
    assert all(int(np.sum(s.heads == 0)) == 1 for s in predicted)  # single-root trees
    # other data, with words the vocabulary has never seen: predicted and scored whole
    other = _write(tmp_path, "1\tyepyeni\t_\tVERB\tVE\t_\t0\troot\t_\t_\n2\tsözcük\t_\tNOUN\tNO\t_\t1\tobj\t_\t_\n"
                             "3\t.\t_\tPUNCT\tPU\t_\t1\tp\t_\t_\n", "new.conllu")
    assert main(["predict", str(out / "model.npz"), str(other), "--out", str(tmp_path / "new_pred.conllu")]) == 0
    assert "test uas" in capsys.readouterr().out
    assert len(read_conllu(tmp_path / "new_pred.conllu")[0].words) == 3


def test_cli_refuses_undeclared_and_misplaced_losses(tmp_path, capsys):
    data = _data(tmp_path)
    base = ["train", "parsing", "--data", str(data), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*base, "--net", "bilstm", "--loss", "sparsemap"]) == 2
    err = capsys.readouterr().err
    assert "--loss sparsemap" in err and "hinge or crf" in err
    assert main([*base, "--loss", "crf"]) == 2  # the linear model: no --loss
    assert "give --net NAME" in capsys.readouterr().err
    assert not (tmp_path / "run" / "model.npz").exists()


# --------------------------------------------------------------------------- bad input
def test_bad_inputs_are_refused(tmp_path):
    train = sentences(tmp_path, 4)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    model = tiny_model(vocab)
    x = pn.encode(train, vocab)[0]
    w = model.get_weights()
    bad = x.copy()
    bad[0, 0] = len(vocab.words)  # an id past the word table: encoded with another vocabulary
    with pytest.raises(InvalidInputError, match="words ids must be in"):
        model.predict(bad, w)
    with pytest.raises(InvalidInputError, match="integer array"):
        model.predict(x.astype(float), w)
    with pytest.raises(InvalidInputError, match="integer array"):
        model.predict(np.zeros((0, 4), np.int64), w)
    with pytest.raises(InvalidInputError, match="gold output"):
        pn.fit(model, vocab, [x], [np.zeros((2, x.shape[0] + 1), np.int64)], tiny_options())
    with pytest.raises(InvalidInputError, match="as many gold trees"):
        pn.fit(model, vocab, [x], [], tiny_options())
    with pytest.raises(InvalidInputError, match="loss must be one of"):
        pn.NetOptions(loss="sparsemap")
    with pytest.raises(InvalidInputError, match="loss must be one of"):
        pn.arc_loss([torch.zeros(2, 2)], [np.zeros(1, np.int64)], "perceptron")
    with pytest.raises(InvalidInputError, match="dropout"):
        pn.NetOptions(dropout=1.0)
    with pytest.raises(InvalidInputError, match="hidden must be an integer"):
        pn.BiLSTMArcScorer(10, 5, 5, 5, 3, hidden=0)


def test_load_parsing_gives_the_development_sentences(tmp_path):
    from structopt.tasks.parsing import load_parsing

    data = load_parsing(_data(tmp_path))
    web, wiki = read_conllu(tmp_path / "data" / "web.conllu"), read_conllu(tmp_path / "data" / "wiki.conllu")
    assert [s.rows for s in data["dev"]] == [s.rows for s in (web[8::10] + wiki[8::10])]
    assert len(data["train"]) == 48 and len(data["test"]) == 6 and len(data["dev"]) == 6  # 30 a file: 24 / 3 / 3


def test_a_saved_network_with_a_bad_vocabulary_is_refused_naming_the_file(tmp_path, capsys):
    from structopt.saved_model import save_model

    train = sentences(tmp_path, 4)
    vocab = pn.Vocabulary.build(train, ["advmod", "conj", "obj", "p", "root"])
    model = tiny_model(vocab)
    conllu = tmp_path / "s0.conllu"
    for name, vocabulary in (("ok", vocab.to_json()), ("bad", {**vocab.to_json(), "counts": [1]}),
                             ("other", {**vocab.to_json(), "labels": ["root"]})):
        path = tmp_path / f"{name}.npz"
        save_model(path, model, model.get_weights(), task="parsing",
                   preprocessing={"labels": list(vocab.labels), "vocabulary": vocabulary})
        code = main(["predict", str(path), str(conllu), "--out", str(tmp_path / f"{name}.conllu")])
        err = capsys.readouterr().err
        if name == "ok":
            assert code == 0 and len(read_conllu(tmp_path / "ok.conllu")) == 4
        else:
            assert code == 2 and str(path) in err and ("counts" in err or "relations differ" in err), err
