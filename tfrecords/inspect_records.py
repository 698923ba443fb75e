"""Print one pretraining example human-readably and summary statistics of a record set.

  python tfrecords/inspect_records.py DIR [--index=0] [--max_examples=20000] [--check]

For the chosen example: every position with its piece, segment, rank and whether it is
a target; the factorization order of the masked/functional tokens of each part. Then,
over up to `--max_examples` records: targets and padded slots per example, span lengths,
A/B lengths, and (with `--check`, default) the schema invariants of every record.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator, Optional

import numpy as np
from absl import app, flags

from tfrecords import manifest as manifest_lib
from tfrecords.pretrain import permutation
from xlnet_tf import cli
from xlnet_tf.text import tokenization

FLAGS = flags.FLAGS


def iter_records(paths, seq_len: int, num_predict: int, limit: Optional[int] = None,
                 batch: int = 256) -> Iterator[Dict[str, np.ndarray]]:
    """Raw records as numpy dicts (int64, `perm_rank` -1 for context as in memory), in stream order."""
    import tensorflow as tf

    from tfrecords.pretrain import writer as pretrain_data

    ds = tf.data.TFRecordDataset(paths)
    if limit is not None:
        ds = ds.take(limit)
    for b in ds.batch(batch).map(lambda s: pretrain_data.parse_compact(s, seq_len, num_predict)):
        b = {k: v.numpy().astype(np.int64) for k, v in b.items() if k in pretrain_data.RECORD_FEATURES}
        for i in range(next(iter(b.values())).shape[0]):
            yield {k: v[i] for k, v in b.items()}


def _runs(flags_: np.ndarray):
    """Lengths of maximal runs of True."""
    d = np.diff(np.concatenate([[0], flags_.astype(np.int8), [0]]))
    return np.flatnonzero(d == -1) - np.flatnonzero(d == 1)


def describe_example(rec, tok, reuse_len: int, out=print) -> None:
    ids, seg, rank = rec["input_ids"], rec["segment_ids"], rec["perm_rank"]
    piece = (lambda i: tok.id_to_piece(i)) if tok else (lambda i: str(int(i)))
    func = permutation.functional_mask(ids)
    tgt = set(int(t) for t in rec["target_index"] if t >= 0)
    out(f"{'pos':>4} {'id':>6} {'seg':>3} {'rank':>5}  piece   (T = target, F = functional, "
        f"'|' = start of the new part)")
    for p in range(ids.shape[0]):
        mark = "T" if p in tgt else ("F" if func[p] else "")
        sep = "|" if p == reuse_len else " "
        r = "" if rank[p] < 0 else str(int(rank[p]))
        out(f"{p:>4}{sep}{int(ids[p]):>6} {int(seg[p]):>3} {r:>5}  {piece(ids[p])!r} {mark}")
    for name, lo, hi in (("reuse", 0, reuse_len), ("new", reuse_len, ids.shape[0])):
        pos = np.flatnonzero(rank[lo:hi] >= 0) + lo
        order = pos[np.argsort(rank[pos], kind="stable")]
        out(f"factorization order, {name} part (after its plain context tokens): "
            + " -> ".join(f"{p}:{piece(ids[p])}{'' if p in tgt else '(F)'}" for p in order))
    n_real = len(tgt)
    out(f"targets: {n_real} of {rec['target_index'].shape[0]} slots "
        f"({rec['target_index'].shape[0] - n_real} padded): "
        + " ".join(f"{int(p)}:{piece(t)}" for p, t in zip(rec["target_index"], rec["target_ids"])
                   if p >= 0))
    if tok:
        text = tok.decode([int(i) for i in ids if i not in tokenization.FUNCTIONAL_IDS])
        out(f"text: {text[:300]!r}{'...' if len(text) > 300 else ''}")


def summarize(paths, m, limit, check: bool, out=print) -> Dict[str, float]:
    p = m["params"]
    L, R, P = p["seq_len"], p["reuse_len"], p["num_predict"]
    n = 0
    n_tgt, n_pad, span_lens, la_list, lb_list = [], [], [], [], []
    for rec in iter_records(paths, L, P, limit):
        if check:
            try:
                permutation.check_compact_example(rec["input_ids"], rec["segment_ids"],
                                                  rec["perm_rank"], rec["target_index"],
                                                  rec["target_ids"], R, p["perm_size"])
            except ValueError as e:
                raise ValueError(f"record #{n}: {e}") from None
        real = rec["target_index"] >= 0
        n_tgt.append(int(real.sum()))
        n_pad.append(int((~real).sum()))
        is_t = np.zeros(L, bool)
        is_t[rec["target_index"][real]] = True
        span_lens.extend(_runs(is_t).tolist())
        seg = rec["segment_ids"]
        lb = int((seg == 1).sum()) - 1
        la_list.append(L - R - 3 - lb)
        lb_list.append(lb)
        n += 1
    if n == 0:
        raise ValueError("no records read")
    stats = {
        "examples_read": n,
        "targets_per_example_mean": float(np.mean(n_tgt)),
        "targets_per_example_min": int(np.min(n_tgt)),
        "padded_slots_per_example_mean": float(np.mean(n_pad)),
        "target_run_length_mean": float(np.mean(span_lens)) if span_lens else 0.0,
        "a_len_mean": float(np.mean(la_list)),
        "b_len_mean": float(np.mean(lb_list)),
    }
    out(f"summary over {n} examples" + (" (all invariants hold)" if check else "") + ":")
    for k, v in stats.items():
        out(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
    return stats


def inspect(directory: str, index: int = 0, max_examples: Optional[int] = 20000,
            check: bool = True, spiece_model: Optional[str] = None, out=print):
    """Print the manifest summary, example `index` and statistics; returns the stats."""
    m = manifest_lib.read_manifest(directory)
    paths = manifest_lib.check_record_files(m)
    p, t = m["params"], m["totals"]
    out(f"records: {directory}: {len(paths)} file(s), {t['num_examples']} examples, "
        f"{t['num_steps']} steps of {p['global_batch_size']} "
        f"({t['num_bytes'] / t['num_examples']:.0f} bytes/example)")
    out("params: " + ", ".join(f"{k}={v}" for k, v in sorted(p.items())))
    out(f"stream layout: {m['stream_layout']['rows']}")
    path = spiece_model or m["spiece_model"]["path"]
    tok = None
    if path and os.path.isfile(path):
        tok = tokenization.XLNetTokenizer(path, uncased=p["uncased"],
                                          keep_accents=p["keep_accents"])
    else:
        out(f"(SentencePiece model {path} not found: showing ids)")
    rec = None
    for k, r in enumerate(iter_records(paths, p["seq_len"], p["num_predict"], index + 1)):
        rec = r
    if rec is None or k != index:
        raise ValueError(f"--index={index} is past the end of the records")
    B, bc = p["global_batch_size"], p["global_batch_size"] // p["num_replicas"]
    row = index % B
    direction = ("backward" if p["bi_data"] and (row % bc) >= bc // 2 else "forward")
    out(f"\nexample #{index}: step {index // B}, row {row} ({direction}), replica {row // bc}")
    describe_example(rec, tok, p["reuse_len"], out=out)
    out("")
    return summarize(paths, m, max_examples, check, out=out)


def _naming_damaged_files(directory: str):
    """A damaged record file is reported by name (nothing to name when the manifest is unreadable: `inspect`
    reports that itself)."""
    try:
        return manifest_lib.naming_corrupt_records(manifest_lib.read_manifest(directory))
    except ValueError:
        return contextlib.nullcontext()


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("usage: inspect_records.py DIR [--index=N]")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with _naming_damaged_files(argv[1]):
            inspect(argv[1], FLAGS.index, FLAGS.max_examples or None, FLAGS.check,
                    FLAGS.spiece_model)
    except ValueError as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    flags.DEFINE_integer("index", 0, "Which example to print (stream order).", lower_bound=0)
    flags.DEFINE_integer("max_examples", 20000, "Records summarized (0 = all).", lower_bound=0)
    flags.DEFINE_bool("check", True, "Check the schema invariants of every record read.")
    flags.DEFINE_string("spiece_model", None, "Override the manifest's model path.")
    cli.run(main)
