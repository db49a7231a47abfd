"""CLIP's byte-level BPE tokenizer (Radford et al., 2021), read from ``vocab.json`` + ``merges.txt``.

Written for this project from the published algorithm; the ids are those of transformers'
``CLIPTokenizer`` (the test compares them on a varied text set). A text becomes token ids in
five steps:

1. special tokens: exact occurrences of ``<|startoftext|>`` / ``<|endoftext|>`` in the raw text
   are their own ids (the text between them goes through steps 2-4);
2. normalisation: Unicode NFC, every whitespace run -> one space, lower case (per character, so a
   capital sigma always becomes ``σ``);
3. pre-tokenisation, CLIP's pattern ``'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+``
   (leftmost alternative wins; whitespace is dropped): a contraction, a run of letters, ONE
   number character, or a run of anything else. The stdlib ``re`` has no ``\\p{L}`` / ``\\p{N}``,
   so :func:`pre_tokenize` scans with :func:`unicodedata.category` (``L*`` letters, ``N*``
   numbers) and the Unicode ``White_Space`` set. A lower-cased special-token spelling (``<|ENDOFTEXT|>``)
   is one piece of the pattern that the byte-level stage splits again into ``<|``, the word and ``|>``;
4. each piece's UTF-8 bytes are mapped to printable characters (:func:`bytes_to_unicode`, GPT-2's
   table), ``</w>`` is appended to the last character, and the pair of adjacent symbols with the
   lowest rank in ``merges.txt`` is merged until no listed pair is left (:meth:`CLIPTokenizer.bpe`);
   a symbol missing from the vocabulary becomes the unknown token (``<|endoftext|>``);
5. ``<|startoftext|>`` + ids + ``<|endoftext|>``, truncated to the context (77: the first 75 ids are
   kept) and padded with ``<|endoftext|>`` (:meth:`CLIPTokenizer.__call__`).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

from ...errors import ConfigError

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
EOW = "</w>"
CONTEXT = 77
TOKENIZER_FILES = ("vocab.json", "merges.txt")
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
# the Unicode White_Space property (the regex engines' \s); str.isspace() also counts U+001C-001F
_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                   "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character table: printable Latin-1 bytes map to themselves, the other 68 to
    U+0100 onwards in byte order, so every byte string is a string of visible characters.

    Example:
        >>> t = bytes_to_unicode()
        >>> t[ord("a")], t[ord(" ")], len(set(t.values()))
        ('a', 'Ġ', 256)
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def normalise(text: str) -> str:
    """Step 2 of the module docstring: NFC, whitespace runs -> one space, per-character lower case.

    Example:
        >>> normalise("A  Cafe\\u0301\\tΣ")
        'a café σ'
    """
    text = unicodedata.normalize("NFC", text)
    out: list[str] = []
    for ch in text:
        if ch in _SPACE:
            if not out or out[-1] != " ":
                out.append(" ")
        else:
            out.append(ch.lower())
    return "".join(out)


def _kind(ch: str) -> str:
    """'s' whitespace, 'L' letter, 'N' number, 'P' anything else."""
    if ch in _SPACE:
        return "s"
    c = unicodedata.category(ch)[0]
    return c if c in ("L", "N") else "P"


def pre_tokenize(text: str) -> list[str]:
    """Step 3 of the module docstring on normalised ``text``: CLIP's pre-tokenisation pieces.

    Example:
        >>> pre_tokenize("it's 2024, naïve!!")
        ['it', "'s", '2', '0', '2', '4', ',', 'naïve', '!!']
    """
    pieces: list[str] = []
    i, n = 0, len(text)
    while i < n:
        for special in (BOS, EOS):
            if text.startswith(special, i):
                pieces += ["<|", special[2:-2], "|>"]  # the byte-level stage splits it again
                i += len(special)
                break
        else:
            c = next((c for c in _CONTRACTIONS if text.startswith(c, i)), None)
            if c is not None:
                pieces.append(c)
                i += len(c)
                continue
            kind = _kind(text[i])
            if kind == "s":
                i += 1
            elif kind == "N":
                pieces.append(text[i])
                i += 1
            else:  # a run of letters, or a run of neither letters, numbers nor whitespace
                j = i + 1
                while j < n and _kind(text[j]) == kind:
                    j += 1
                pieces.append(text[i:j])
                i = j
    return pieces


def read_tokenizer_files(folder: str | Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocabulary, merges in rank order) of a CLIP tokenizer folder (``vocab.json``, ``merges.txt``).

    Raises:
        ConfigError: a file is missing or malformed (the message names it).

    Example:
        >>> read_tokenizer_files("/no/such/folder")
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: '/no/such/folder' lacks the CLIP tokenizer files vocab.json, merges.txt; copy ...
    """
    path = Path(folder)
    missing = [f for f in TOKENIZER_FILES if not (path / f).is_file()]
    if missing:
        raise ConfigError(f"'{folder}' lacks the CLIP tokenizer files {', '.join(missing)}; copy them from the "
                          "checkpoint's release (the transformers layout: vocab.json and merges.txt next to "
                          "config.json), or compute class embeddings yourself and call set_class_embeddings")
    try:
        vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"'{path / 'vocab.json'}' is not a JSON token -> id map: {e}") from e
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ConfigError(f"'{path / 'vocab.json'}' is not a JSON token -> id map")
    merges: list[tuple[str, str]] = []
    for num, line in enumerate((path / "merges.txt").read_text(encoding="utf-8").splitlines(), 1):
        if not line or (num == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ConfigError(f"'{path / 'merges.txt'}' line {num} is not two symbols separated by a space: {line!r}")
        merges.append((parts[0], parts[1]))
    return vocab, merges


class CLIPTokenizer:
    """CLIP's tokenizer (module docstring): texts -> token ids Tensor[B, ``context``] (int64).

    ``vocab`` maps tokens to ids and must hold ``<|startoftext|>`` and ``<|endoftext|>``;
    ``merges`` are the BPE merges, lowest rank first. :meth:`from_folder` reads them from disk.

    Example:
        >>> vocab = {c: i for i, c in enumerate(["c", "a", "t", "t</w>", "ca", "cat</w>", BOS, EOS])}
        >>> tok = CLIPTokenizer(vocab, [("c", "a"), ("ca", "t</w>")], context=8)
        >>> tok.encode("Cat CAT tac")  # "c</w>" is not in the vocabulary: the unknown id 7
        [6, 5, 5, 2, 1, 7, 7]
        >>> tok(["cat"]).tolist()
        [[6, 5, 7, 7, 7, 7, 7, 7]]
    """

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], *, context: int = CONTEXT) -> None:
        for special in (BOS, EOS):
            if special not in vocab:
                raise ConfigError(f"the CLIP vocabulary has no {special!r} token; is this a CLIP vocab.json?")
        if context < 2:
            raise ConfigError(f"CLIP tokenizer context={context} leaves no room for the start and end tokens")
        self.vocab = dict(vocab)
        self.ranks = {pair: r for r, pair in reversed(list(enumerate(merges)))}  # first listing wins
        self.context = int(context)
        self.bos_id, self.eos_id = self.vocab[BOS], self.vocab[EOS]
        self.unk_id = self.pad_id = self.eos_id
        self._bytes = bytes_to_unicode()
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_folder(cls, folder: str | Path, *, context: int = CONTEXT) -> CLIPTokenizer:
        """The tokenizer of a checkpoint folder's ``vocab.json`` + ``merges.txt``
        (:func:`read_tokenizer_files`, whose errors it raises)."""
        vocab, merges = read_tokenizer_files(folder)
        return cls(vocab, merges, context=context)

    def bpe(self, piece: str) -> list[str]:
        """Step 4 of the module docstring on one pre-tokenised ``piece``: its BPE symbols.

        Example:
            >>> CLIPTokenizer({BOS: 0, EOS: 1}, [("a", "b"), ("ab", "c</w>")]).bpe("abc")
            ['abc</w>']
        """
        word = [self._bytes[b] for b in piece.encode("utf-8")]
        word[-1] += EOW
        while len(word) > 1:
            rank, pair = min((self.ranks.get(p, len(self.ranks)), p) for p in zip(word, word[1:], strict=False))
            if rank == len(self.ranks):
                break
            merged: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def _piece_ids(self, piece: str) -> list[int]:
        ids = self._cache.get(piece)
        if ids is None:
            ids = [self.vocab.get(s, self.unk_id) for s in self.bpe(piece)]
            if len(self._cache) < 65536:
                self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """One text -> ``[<|startoftext|>, ids..., <|endoftext|>]``, at most ``context`` ids."""
        ids: list[int] = []
        for segment, special in _split_specials(text):
            if special:
                ids.append(self.vocab[segment])
            else:
                for piece in pre_tokenize(normalise(segment)):
                    ids += self._piece_ids(piece)
        return [self.bos_id, *ids[: self.context - 2], self.eos_id]

    def __call__(self, texts: str | Sequence[str]) -> Tensor:
        """Texts -> Tensor[B, ``context``] int64: :meth:`encode` each, padded with ``<|endoftext|>``."""
        if isinstance(texts, str):
            texts = [texts]
        out = torch.full((len(texts), self.context), self.pad_id, dtype=torch.int64)
        for row, text in enumerate(texts):
            ids = self.encode(text)
            out[row, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return out


def _split_specials(text: str) -> list[tuple[str, bool]]:
    """Step 1: ``text`` cut at exact special-token occurrences -> [(segment, is_special)]."""
    out: list[tuple[str, bool]] = []
    i = start = 0
    while i < len(text):
        special = next((s for s in (BOS, EOS) if text.startswith(s, i)), None)
        if special is None:
            i += 1
            continue
        if i > start:
            out.append((text[start:i], False))
        out.append((special, True))
        i = start = i + len(special)
    if start < len(text):
        out.append((text[start:], False))
    return out
