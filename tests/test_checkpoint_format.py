"""Checkpoints are untrusted input: sealed archives (arrays + JSON under a SHA-256, no pickle).

Every single-byte corruption of a real checkpoint is refused before use, a pickle crafted to run
code is refused without running it, a sealed file that smuggles a pickle or an unknown type is
refused, and resuming a run that already met its budget returns it unchanged.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

import structopt as so
from structopt.archive import SEAL_PREFIX, decode, encode, read_archive, state_type, write_archive
from structopt.errors import InvalidInputError, StructoptError
from structopt.solvers import SOLVERS
from structopt.solvers.base import CHECKPOINT_FORMAT, load_checkpoint


def _problem(n: int = 6, seed: int = 0) -> so.SSVMProblem:
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(2, 5)), 4)) for _ in range(n)]
    Y = [np.argmax(x[:, :3], axis=1) for x in X]
    return so.SSVMProblem(so.ChainModel(n_features=4, n_states=3), X, Y, so.Hamming(), lam=0.1)


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> tuple[Path, so.SSVMProblem]:
    path = tmp_path_factory.mktemp("ckpt") / "bcfw.ckpt"
    problem = _problem()
    SOLVERS["bcfw"](problem, max_passes=2, random_state=0, checkpoint=path)
    return path, problem


# --------------------------------------------------------------------------- the codec
@state_type
class _Registered:
    def __init__(self, a):
        self.a = a


def test_codec_round_trips_every_supported_kind_exactly():
    rng = np.random.default_rng(5)
    rng.normal(size=3)
    model = object()
    value = {"f": 0.1 + 0.2, "i": 2**70, "b": True, "none": None, "s": "é", "inf": float("inf"),
             "arr": np.arange(6, dtype=np.int32).reshape(2, 3), "empty": np.zeros((0, 4)),
             "np_scalar": np.float32(1.5), "np_int": np.int64(-3), "tuple": (1, (2.5, "x")), "list": [1, [2]],
             "int_keys": {3: "three", 4: np.ones(2)}, "rng": rng, "obj": _Registered(np.ones(3)), "model": model}
    data, arrays = encode(value, {"model": model})
    json.dumps(data)  # JSON-able
    back = decode(json.loads(json.dumps(data)), arrays, {"model": model})
    assert back["f"] == value["f"] and back["i"] == 2**70 and back["inf"] == float("inf")
    assert back["b"] is True and back["none"] is None and back["s"] == "é"
    assert back["arr"].dtype == np.int32 and np.array_equal(back["arr"], value["arr"])
    assert back["empty"].shape == (0, 4)
    assert type(back["np_scalar"]) is np.float32 and type(back["np_int"]) is np.int64
    assert back["tuple"] == (1, (2.5, "x")) and back["list"] == [1, [2]]
    assert back["int_keys"][3] == "three" and np.array_equal(back["int_keys"][4], np.ones(2))
    assert back["rng"].normal() == rng.normal()  # the generator continues where it was
    assert isinstance(back["obj"], _Registered) and np.array_equal(back["obj"].a, np.ones(3))
    assert back["model"] is model


@pytest.mark.parametrize("value", [np.array([object()], dtype=object), {"f": lambda x: x}, {1, 2}, object()])
def test_codec_refuses_what_it_cannot_store_safely(value):
    with pytest.raises(InvalidInputError, match="cannot store"):
        encode({"state": value})


# --------------------------------------------------------------------------- integrity
def test_every_single_byte_corruption_of_a_checkpoint_is_refused(small_checkpoint):
    path, problem = small_checkpoint
    good = path.read_bytes()
    load_checkpoint(path, "bcfw", problem=problem)  # the intact file loads
    bad = path.with_name("bad.ckpt")
    rng = np.random.default_rng(0)
    refused = 0
    for position in range(len(good)):
        corrupted = bytearray(good)
        corrupted[position] ^= int(rng.integers(1, 256))  # a different byte, never the same
        bad.write_bytes(bytes(corrupted))
        with pytest.raises(InvalidInputError, match=re.escape(str(bad))):
            load_checkpoint(bad, "bcfw", problem=problem)
        refused += 1
    assert refused == len(good) > 1000


@pytest.mark.parametrize("change", ["truncate", "append", "empty", "seal only"])
def test_truncated_extended_or_empty_checkpoints_are_refused(small_checkpoint, tmp_path, change):
    path, problem = small_checkpoint
    good = path.read_bytes()
    data = {"truncate": good[: len(good) // 2], "append": good + b"\0", "empty": b"",
            "seal only": good[-81:]}[change]
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(data)
    with pytest.raises(InvalidInputError, match=re.escape(str(bad))) as error:
        load_checkpoint(bad, "bcfw", problem=problem)
    assert "\n" not in str(error.value)


class _RunsCode:
    def __reduce__(self):
        return (Path.write_text, (Path(_RunsCode.marker), "pwned"))


def test_a_pickle_crafted_to_run_code_is_refused_without_running_it(tmp_path):
    _RunsCode.marker = str(tmp_path / "executed")
    crafted = tmp_path / "evil.ckpt"
    crafted.write_bytes(pickle.dumps({"format": 2, "solver": "bcfw", "state": _RunsCode(), "trace": []}))
    with pytest.raises(InvalidInputError, match="old pickle format") as error:
        load_checkpoint(crafted, "bcfw")
    assert str(crafted) in str(error.value)
    assert not (tmp_path / "executed").exists()


def _seal(body: bytes) -> bytes:
    """What an attacker who knows the format can do: a correct seal over any zip body."""
    return body + SEAL_PREFIX + hashlib.sha256(body).hexdigest().encode()


def _sealed_zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.comment = SEAL_PREFIX + b"0" * 64
    return _seal(buffer.getvalue()[: -len(SEAL_PREFIX) - 64])


def test_a_sealed_file_smuggling_a_pickled_array_is_refused_without_running_it(tmp_path):
    _RunsCode.marker = str(tmp_path / "executed")
    npy = io.BytesIO()
    np.save(npy, np.array([_RunsCode()], dtype=object), allow_pickle=True)
    meta = {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": "bcfw", "fingerprint": {},
            "payload": {"$dict": {"state": {"$array": "a0"}, "trace": [], "w": {"$array": "a0"}}}}
    crafted = tmp_path / "smuggled.ckpt"
    crafted.write_bytes(_sealed_zip({"meta.json": json.dumps(meta).encode(), "a0.npy": npy.getvalue()}))
    with pytest.raises(InvalidInputError, match="malformed"):
        load_checkpoint(crafted, "bcfw")
    assert not (tmp_path / "executed").exists()


@pytest.mark.parametrize("payload", [{"$object": "os.system", "state": "echo"}, {"$ref": "os"}, {"$rng": {"$dict": {
    "bit_generator": "Evil", "state": {}}}}, {"$nope": 1}])
def test_a_sealed_file_naming_an_unknown_type_is_refused(tmp_path, payload):
    meta = {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": "bcfw", "fingerprint": {},
            "payload": {"$dict": {"state": payload, "trace": []}}}
    crafted = tmp_path / "forged.ckpt"
    crafted.write_bytes(_sealed_zip({"meta.json": json.dumps(meta).encode()}))
    with pytest.raises(InvalidInputError, match="malformed"):
        load_checkpoint(crafted, "bcfw")


def test_the_file_is_a_plain_npz_that_numpy_reads_without_pickle(small_checkpoint):
    path, _ = small_checkpoint
    with np.load(path, allow_pickle=False) as npz:
        assert len(npz.files) > 0
    meta, _ = read_archive(path, "checkpoint")
    assert meta["kind"] == "structopt checkpoint" and meta["solver"] == "bcfw"


def test_archive_errors_name_the_file(tmp_path):
    with pytest.raises(StructoptError, match="does not exist"):
        read_archive(tmp_path / "missing.npz", "model")
    with pytest.raises(InvalidInputError, match="is a directory"):
        read_archive(tmp_path, "checkpoint")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(InvalidInputError, match=r"text\.npz is not a structopt archive"):
        read_archive(tmp_path / "text.npz", "model")
    size = write_archive(tmp_path / "ok.npz", {"a": 1}, {"x": np.arange(3)})
    assert size == (tmp_path / "ok.npz").stat().st_size
    assert read_archive(tmp_path / "ok.npz")[0] == {"a": 1}


@pytest.mark.slow
def test_a_sample_of_byte_corruptions_of_an_ocr_checkpoint_is_refused(tmp_path):
    from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

    train, _ = split(load_ocr(None), "bcfw")
    model, loss = paper_model_and_loss()
    problem = so.SSVMProblem(model, train["X"][:500], train["y"][:500], loss, 0.01)
    path = tmp_path / "ocr.ckpt"
    SOLVERS["bcfw"](problem, max_passes=1, random_state=0, checkpoint=path)
    good = path.read_bytes()
    rng = np.random.default_rng(1)
    # the zip's local headers, JSON and array headers sit at the start and the end; sample those densely
    positions = np.unique(np.concatenate([np.arange(300), len(good) - 1 - np.arange(300),
                                          rng.integers(0, len(good), 400)]))
    bad = tmp_path / "bad.ckpt"
    for position in positions:
        corrupted = bytearray(good)
        corrupted[position] ^= int(rng.integers(1, 256))
        bad.write_bytes(bytes(corrupted))
        with pytest.raises(InvalidInputError, match=re.escape(str(bad))):
            load_checkpoint(bad, "bcfw", problem=problem)
    assert len(good) > 1_000_000 and len(positions) > 900


# --------------------------------------------------------------------------- finished runs
CONVEX_SOLVERS = sorted({run.solver_name for run in SOLVERS.values()} - {"prox_linear", "sgd_nonconvex"})


@pytest.mark.parametrize("name", CONVEX_SOLVERS)
def test_resuming_a_finished_run_returns_it_unchanged(tmp_path, name):
    problem = _problem(n=4, seed=1)
    path = tmp_path / f"{name}.ckpt"
    first = SOLVERS[name](problem, max_passes=2, random_state=0, checkpoint=path)
    again = SOLVERS[name](problem, max_passes=2, random_state=0, checkpoint=path, resume=path)
    assert np.array_equal(again.w, first.w)
    assert again.trace == first.trace
    assert again.info["resumed_finished"] and "already finished" in again.info["stop_reason"]
    longer = SOLVERS[name](problem, max_passes=3, random_state=0, resume=path)  # a larger budget continues
    assert longer.trace[: len(first.trace)] == first.trace and longer.trace[-1]["passes"] >= 3 - 1e-9


@pytest.mark.parametrize("depth", [150, 100_000])
def test_a_sealed_file_nesting_too_deep_is_refused_in_one_line(tmp_path, depth):
    # 100,000 levels break json's decoder, 150 the recursive decoders after it: each was a raw RecursionError
    nested = "[" * depth + "]" * depth
    body = ('{"format": ' + str(CHECKPOINT_FORMAT) + ', "kind": "structopt checkpoint", "solver": "bcfw", '
            '"fingerprint": {}, "payload": {"$dict": {"state": ' + nested + ', "trace": []}}}')
    crafted = tmp_path / "deep.ckpt"
    crafted.write_bytes(_sealed_zip({"meta.json": body.encode()}))
    with pytest.raises(InvalidInputError, match=r"deep\.ckpt is malformed \(its metadata nests deeper") as error:
        load_checkpoint(crafted, "bcfw")
    assert "\n" not in str(error.value)
    model = tmp_path / "deep.model"
    model.write_bytes(_sealed_zip({"meta.json": ('{"format": 1, "model": ' + nested + '}').encode()}))
    with pytest.raises(InvalidInputError, match=r"deep\.model is malformed"):
        so.load_model(model)
    problem = _problem()
    with pytest.raises(InvalidInputError, match=r"deep\.ckpt is malformed"):
        SOLVERS["bcfw"](problem, max_passes=1, resume=crafted)
