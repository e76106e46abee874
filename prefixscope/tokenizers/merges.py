"""The `tokenizers` library's BPE model of one pre-tokenized word, in Python, from the
merges of a tokenizer.json kept in the disk cache: so that a run whose texts the ASCII
path (`ascii_bpe`) takes whole never deserializes the library's tokenizer.

Why: `tokenizers`' ``Tokenizer.from_str`` of DeepSeek's 6 MB tokenizer.json costs
0.25-0.4 s of CPU in every process that tokenizes (its 128k-entry vocabulary and 127k
merges), a fifth of a small report and of ``diff --all`` on long sessions (issue 37).
The ASCII path asks the model for the BPE of each distinct word only (a few thousand in
a small log), and reading the merges back from the cache is ~0.02 s.

**The claim.** For a word ``w`` (ByteLevel-mapped characters, each in the vocabulary),
`MergeBPE.ids(w)` is the id list the library's ``models.BPE.tokenize(w)`` gives, for a
BPE model without dropout, ``ignore_merges``, subword prefix or suffix (the ones
`boundaries.deepseek_like` and `hf` let through). It is the library's own algorithm
(``Word::merge_all`` in tokenizers/src/models/bpe/word.rs), step for step:

* the word starts as one symbol per character, each its vocabulary id;
* a queue holds a candidate merge for every adjacent pair the merges list has, ordered
  by (rank, position): the lowest rank first, the leftmost among equal ranks (the
  library's ``Merge`` ordering; its ``BinaryHeap`` is a max-heap over the reversed order);
* a candidate is dropped when its left symbol was merged away, when it is the last
  symbol, or when the pair now at its position makes another token than the candidate
  (the library compares the new ids, not the ranks, and so does `ids`);
* a merge replaces the left symbol by the new id, removes the right one, and queues the
  pairs the new symbol forms with its neighbours.

The merges map is built as the library builds its ``HashMap``: rank = the merge's index
in the file, a pair listed twice keeps its last index (a later insert overwrites), the
new id is the vocabulary's id of the two pieces joined. `hf` derives the arrays from the
file only when every merge parses as the library parses it (two pieces, both and their
join in the vocabulary); otherwise it keeps no merges and the library does the BPE.

tests/test_tokenizer_merges.py compares `ids` with the library's model on Hypothesis
ASCII words, on every piece of DeepSeek's vocabulary as a word, and on Hypothesis merges
lists the library parses from a tokenizer.json of its own (repeated pairs, both forms of
a merge), and the lazily loaded tokenizer's ids, offsets and decoded tokens with the
library's.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np


class Token(NamedTuple):
    """What `ascii_bpe` reads of a library ``Token``: its id."""

    id: int


# A pair (left, right) as one int key: ids are below 2**32.
_SHIFT = 32


class MergeBPE:
    """`ids(word)`: the library's BPE of one ByteLevel-mapped word (the claim above)."""

    def __init__(self, merges: np.ndarray, char_ids: Mapping[str, int]) -> None:
        """`merges`: (n, 3) int64, each row (left id, right id, new id), in the file's
        order; `char_ids`: the id of every single character the vocabulary holds that a
        word may start from."""
        keys = (merges[:, 0] << _SHIFT) | merges[:, 1]
        # the library's HashMap: a pair listed twice keeps its last rank
        self._ranks: dict[int, int] = dict(zip(keys.tolist(), range(len(merges)),
                                               strict=True))
        self._new: list[int] = merges[:, 2].tolist()
        self._chars = dict(char_ids)

    def tokenize(self, word: str) -> list[Token] | None:
        """`ids(word)` as the library's tokens (what `ascii_bpe` reads: ``.id``)."""
        found = self.ids(word)
        return None if found is None else [Token(i) for i in found]

    def ids(self, word: str) -> list[int] | None:
        """The ids of `word`; None when a character of it is not in the vocabulary (the
        library's unknown-token rules: not taken here)."""
        chars = self._chars
        try:
            ids = [chars[c] for c in word]
        except KeyError:
            return None
        ranks, new = self._ranks, self._new
        size = len(ids)
        nxt = list(range(1, size + 1))
        nxt[-1:] = [-1]
        prev = list(range(-1, size - 1))
        alive = [True] * size
        queue = [(rank, pos) for pos in range(size - 1)
                 if (rank := ranks.get(ids[pos] << _SHIFT | ids[pos + 1])) is not None]
        heapq.heapify(queue)
        while queue:
            rank, pos = heapq.heappop(queue)
            right = nxt[pos]
            if not alive[pos] or right == -1:
                continue
            now = ranks.get(ids[pos] << _SHIFT | ids[right])
            if now is None or new[now] != new[rank]:  # an expired candidate
                continue
            ids[pos] = new[rank]
            alive[right] = False
            after = nxt[pos] = nxt[right]
            if after != -1:
                prev[after] = pos
            before = prev[pos]
            if before >= 0 and (r := ranks.get(ids[before] << _SHIFT | ids[pos])) is not None:
                heapq.heappush(queue, (r, before))
            if after != -1 and (r := ranks.get(ids[pos] << _SHIFT | ids[after])) is not None:
                heapq.heappush(queue, (r, pos))
        return [i for i, keep in zip(ids, alive, strict=True) if keep]


def merges_of(model: Mapping[str, Any]) -> np.ndarray | None:
    """The (left, right, new) id rows of a tokenizer.json's BPE ``model`` as the library
    reads them, or None where it might read them otherwise (a merge that is not two
    pieces, a piece or join missing from the vocabulary, a model the claim is not about)."""
    vocab = model.get("vocab")
    merges = model.get("merges")
    if model.get("type") != "BPE" or model.get("ignore_merges") or model.get("dropout") or \
            model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or \
            not isinstance(vocab, dict) or not isinstance(merges, list):
        return None
    rows: list[tuple[int, int, int]] = []
    for merge in merges:
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(parts, list) or len(parts) != 2:
            return None
        left, right = parts
        if not (isinstance(left, str) and isinstance(right, str)):
            return None
        try:
            rows.append((vocab[left], vocab[right], vocab[left + right]))
        except KeyError:
            return None
    out = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return out if len(out) and int(out.min()) >= 0 and int(out.max()) < 1 << _SHIFT else None
