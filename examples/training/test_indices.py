"""specdec_indices.py against the vectors the C++ generators made (tests/data/longspec_index_vectors.json,
also read by tests/position/test_index_vectors.cpp): philox_stream words and below(n), anchor-offset
indices (LongSpec Algorithm 1), flash noisy slices (Algorithm 2). Plain Python: python3 test_indices.py
(ctest: examples.training.indices).
"""

import json
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import specdec_indices as si  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "tests", "data", "longspec_index_vectors.json")
SLICE_FIELDS = ("shift", "query_begin", "query_end", "key_begin", "key_end", "pad_rows")


def load():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def hex64(s):
    """64-bit values are stored as "0x" + 16 hex digits."""
    if not (isinstance(s, str) and s.startswith("0x")):
        raise ValueError(f"expected a 0x hex string, got {s!r}")
    v = int(s, 16)
    if not 0 <= v < 1 << 64:
        raise ValueError(f"not a 64-bit value: {s}")
    return v


def expected_indices(case):
    """"indices" in full, or "index_runs": [first, count] runs of consecutive values."""
    if ("indices" in case) == ("index_runs" in case):
        raise ValueError("a case has exactly one of indices and index_runs")
    if "indices" in case:
        return case["indices"]
    out = []
    for first, count in case["index_runs"]:
        if count < 1:
            raise ValueError(f"empty run {first}, {count}")
        out.extend(range(first, first + count))
    return out


class IndexVectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.v = load()

    def cases(self, section):
        cs = self.v[section]
        self.assertTrue(cs, f"section {section} is empty")  # no vacuous pass
        return cs

    def assertSame(self, got, want):
        """Element by element, naming the first difference (assertEqual's diff of 65K-entry lists is slow)."""
        self.assertEqual(len(got), len(want), "lengths differ")
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                self.fail(f"first difference at element {i}: got {g}, want {w}")

    def test_philox_stream_words(self):
        for c, case in enumerate(self.cases("philox_stream")):
            with self.subTest(case=c):
                rng = si.philox_stream(hex64(case["seed"]), hex64(case["stream"]), hex64(case["word_offset"]))
                self.assertSame([rng.next_u32() for _ in case["words"]], case["words"])

    def test_below(self):
        for c, case in enumerate(self.cases("below")):
            with self.subTest(case=c):
                n = case["n"]
                self.assertTrue(1 <= n < 1 << 32)
                rng = si.philox_stream(hex64(case["seed"]), hex64(case["stream"]), hex64(case["word_offset"]))
                self.assertSame([rng.below(n) for _ in case["values"]], case["values"])

    def test_anchor_offset_indices_batch(self):
        for c, case in enumerate(self.cases("anchor_offset_indices_batch")):
            with self.subTest(case=c):
                indices, offsets = si.anchor_offset_indices_batch(
                    hex64(case["seed"]), case["step"], case["max_len"], case["lengths"], case["num_anchors"])
                self.assertSame(offsets, case["offsets"])
                self.assertSame(indices, expected_indices(case))

    def test_anchor_offset_indices_single(self):
        # Algorithm 1 line 4 (one word from the stream), then lines 3 and 5.
        for c, case in enumerate(self.cases("anchor_offset_indices")):
            with self.subTest(case=c):
                word_offset = hex64(case["word_offset"])
                rng = si.philox_stream(hex64(case["seed"]), hex64(case["stream"]), word_offset)
                o = si.anchor_offset_draw(case["n"], case["max_len"], rng)
                self.assertEqual(o, case["offset"])
                self.assertEqual(rng.offset, word_offset + 1)
                self.assertSame(si.anchor_offset_indices(o, case["n"], case["num_anchors"]), expected_indices(case))

    def test_flash_noisy_training_batch(self):
        for c, case in enumerate(self.cases("flash_noisy_training_batch")):
            with self.subTest(case=c):
                got = si.flash_noisy_training_batch(hex64(case["seed"]), case["step"], case["gamma"], case["seq_lens"])
                self.assertEqual(len(got), len(case["slices"]))
                for b, (g, w) in enumerate(zip(got, case["slices"])):
                    self.assertEqual(sorted(w), sorted(SLICE_FIELDS), f"sequence {b}: recorded fields")
                    self.assertEqual({k: g[k] for k in SLICE_FIELDS}, w, f"sequence {b}")


if __name__ == "__main__":
    unittest.main()
