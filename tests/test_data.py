import pytest
import torch
from support.paths import REPO_ROOT

from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import CharTokenizer, check_microbatches, load_corpus, split_microbatches


def test_shipped_corpus_is_small_and_split(corpus):
    assert 0 < len(corpus.val) < len(corpus.train)
    assert abs(len(corpus.val) / (len(corpus.train) + len(corpus.val)) - 0.1) < 0.001
    assert corpus.tokenizer.vocab_size < 64  # fits the default model's vocabulary


def test_corpus_is_reproducible_from_its_script(tmp_path):
    import importlib.util

    script = REPO_ROOT / "data" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = (script.parent / "corpus.txt").read_text(encoding="utf-8")
    assert module.make_corpus(1_000_000, 0) == shipped
    assert len(shipped.encode()) <= 5 * 2**20


def test_tokenizer_round_trip():
    tok = CharTokenizer.from_text("hello world")
    assert tok.decode(tok.encode("world hello")) == "world hello"
    with pytest.raises(CourseError, match="not in the vocabulary"):
        tok.encode("xyz")


def test_batches_are_shifted_by_one_and_seeded(corpus):
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    x, y = corpus.batch("train", 4, 16, g1)
    x2, _ = corpus.batch("train", 4, 16, g2)
    assert torch.equal(x, x2)
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_microbatches_split_the_batch_in_order():
    x = torch.arange(24).view(8, 3)
    parts = split_microbatches(x, x + 1, 4)
    assert len(parts) == 4
    assert torch.equal(torch.cat([p[0] for p in parts]), x)


@pytest.mark.parametrize("m", [0, 3, 5, 9])
def test_microbatches_that_do_not_divide_are_refused_with_the_choices(m):
    with pytest.raises(CourseError) as err:
        check_microbatches(8, m)
    msg = str(err.value)
    assert str(m) in msg
    if m > 0:
        assert "[1, 2, 4, 8]" in msg


def test_missing_and_empty_data_files(tmp_path):
    with pytest.raises(CourseError, match="does not exist"):
        load_corpus(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(CourseError, match="holds 0 characters"):
        load_corpus(empty)


@pytest.mark.parametrize(
    "content, words",
    [
        ("café au lait\n".encode("latin-1") * 200, ["is not UTF-8 text", "byte 3 is 0xe9"]),
        (bytes(range(256)) * 8, ["is not UTF-8 text", "byte 128 is 0x80"]),
        (b"\x00" * 2000, ["holds NUL bytes, so it is binary"]),
    ],
)
def test_a_latin1_or_binary_file_is_one_clear_error(tmp_path, content, words):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(CourseError) as err:
        load_corpus(path)
    for w in [str(path), "expected a UTF-8 text file", *words]:
        assert w in str(err.value)
