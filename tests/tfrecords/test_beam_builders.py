"""tfrecords/beam/: the record builders as Apache Beam pipelines (DirectRunner).

The Beam tests need apache-beam, which caps protobuf below 7 while requirements.txt pins
protobuf 7, so they run in the separate environment of requirements-beam.txt:

    python3 -m venv .venv-beam && .venv-beam/bin/pip install -r requirements-beam.txt pytest
    .venv-beam/bin/python -m pytest -q tests/tfrecords/test_beam_builders.py

In the main environment they are skipped (`importorskip`); the pin check below runs in both.
"""

import filecmp
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords import classifier_data
from tfrecords.readers import corpus as corpus_lib
from tfrecords import inspect_records
from tfrecords import manifest as manifest_lib
from tfrecords.pretrain import writer as PD
from tfrecords.readers import processors
from tfrecords import race_data
from tfrecords import tagging_data

S = F.SMALL


@pytest.fixture(scope="module")
def BP():
    pytest.importorskip("apache_beam", reason="needs apache-beam: pip install -r "
                        "requirements-beam.txt (a separate environment, see the module doc)")
    from tfrecords.beam import pretrain_pipeline

    return pretrain_pipeline


def _pins(path):
    pins = {}
    with open(os.path.join(F.REPO_ROOT, path), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                name, version = line.split("==")
                pins[name.lower()] = version
    return pins


def test_requirements_beam_are_the_runtime_pins_with_protobuf_6():
    runtime, beam = _pins("requirements.txt"), _pins("requirements-beam.txt")
    assert re.fullmatch(r"2\.\d+\.\d+", beam.pop("apache-beam"))
    assert beam.pop("protobuf").startswith("6.")  # apache-beam: protobuf<7
    runtime.pop("protobuf")
    assert beam == runtime


def _same_record_dirs(a, b):
    """Same file names; records and manifest.json byte-identical (sidecars hold timings)."""
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    assert not [n for n in names if ".tmp" in n]
    for n in names:
        if n.endswith(".tfrecord") or n == manifest_lib.MANIFEST_NAME:
            assert filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False), n


def _decoded(directory):
    m = manifest_lib.read_manifest(directory)
    p = m["params"]
    recs = list(inspect_records.iter_records(manifest_lib.check_record_files(m),
                                             p["seq_len"], p["num_predict"]))
    return m, recs


# ---- pretraining -------------------------------------------------------------------------------

def test_pretrain_direct_runner_equals_local_builder(BP, tmp_path):
    local = F.built_records()
    out = str(tmp_path / "beam")
    m = BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), out, F.small_config(),
                                       log=None)
    m_local, recs_local = _decoded(local)
    m_beam, recs_beam = _decoded(out)
    assert m_beam["totals"] == m_local["totals"] == m["totals"]
    assert len(recs_beam) == len(recs_local) == m_local["totals"]["num_examples"] > 0
    for x, y in zip(recs_local, recs_beam):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    _same_record_dirs(local, out)


def test_pretrain_staged_io_and_worker_processes_equal_local(BP, tmp_path):
    """The code path of gs:// inputs/outputs (byte-range staging, upload + rename) and
    two DirectRunner worker processes: still the local builder's files."""
    cfg = F.small_config(bi_data=False, num_replicas=1, num_passes=1, num_shards=4, seed=3)
    local = str(tmp_path / "local")
    PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), local, cfg, log=None)
    staged = str(tmp_path / "staged")
    BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), staged, cfg, stage_io=True,
                                   log=None)
    _same_record_dirs(local, staged)
    procs = str(tmp_path / "procs")
    BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), procs, cfg, num_processes=2,
                                   log=None)
    _same_record_dirs(local, procs)


def _fake_remote_filesystem(root):
    """A Beam FileSystem with scheme `xlnetfake://` over the local folder `root`: Beam's
    FileSystems API (match, open + seek, create, rename, delete) as for gs://."""
    from apache_beam.io.filesystem import FileMetadata
    from apache_beam.io.localfilesystem import LocalFileSystem

    prefix = "xlnetfake://"

    def loc(p):
        return os.path.join(root, p[len(prefix):]) if p.startswith(prefix) else p

    def rem(p):
        return prefix + os.path.relpath(p, root) if p.startswith(root) else p

    class FakeRemoteFileSystem(LocalFileSystem):
        @classmethod
        def scheme(cls):
            return "xlnetfake"

        def join(self, base, *parts):
            if not base.startswith(prefix):
                return super().join(base, *parts)
            return "/".join([base.rstrip("/")] + [q.strip("/") for q in parts])

        def split(self, path):
            head, tail = super().split(loc(path))
            return rem(head), tail

        def _list(self, dir_or_prefix):
            for m in super()._list(loc(dir_or_prefix)):
                yield FileMetadata(rem(m.path), m.size_in_bytes, m.last_updated_in_seconds)

        def _url_dirname(self, url_or_path):
            return rem(super()._url_dirname(loc(url_or_path)))

        def metadata(self, path):
            m = super().metadata(loc(path))
            return FileMetadata(rem(m.path), m.size_in_bytes, m.last_updated_in_seconds)

    for name in ("mkdirs", "create", "open", "exists", "size", "last_updated", "checksum"):
        def one(self, path, *a, _name=name, **k):
            return getattr(LocalFileSystem, _name)(self, loc(path), *a, **k)
        setattr(FakeRemoteFileSystem, name, one)
    for name in ("copy", "rename"):
        def two(self, srcs, dsts, _name=name):
            return getattr(LocalFileSystem, _name)(self, [loc(x) for x in srcs],
                                                   [loc(x) for x in dsts])
        setattr(FakeRemoteFileSystem, name, two)
    FakeRemoteFileSystem.delete = lambda self, paths: [os.remove(loc(x)) for x in paths]
    return FakeRemoteFileSystem


def test_pretrain_remote_paths_equal_local(BP, tmp_path):
    """gs://-style inputs, model and output (Beam FileSystems, worker-local staging of the
    shard's byte ranges, upload + rename): the local builder's records."""
    root = str(tmp_path / "bucket")
    shutil.copytree(F.CORPUS_DIR, os.path.join(root, "corpus"))
    shutil.copy(F.tiny_spm(), os.path.join(root, "sp.model"))
    fake = _fake_remote_filesystem(root)
    try:
        m = BP.build_pretrain_records_beam("xlnetfake://corpus/*.txt", "xlnetfake://sp.model",
                                           "xlnetfake://records", F.small_config(), log=None)
        local = F.built_records()
        out = os.path.join(root, "records")
        names = sorted(os.listdir(out))
        assert names == sorted(os.listdir(local))
        for n in names:
            if n.endswith(".tfrecord"):
                assert filecmp.cmp(os.path.join(local, n), os.path.join(out, n), False), n
        want = manifest_lib.read_manifest(local)
        assert m["fingerprint"] == want["fingerprint"]
        assert [f["path"] for f in m["inputs"]["files"]] == [
            f"xlnetfake://corpus/{os.path.basename(f['path'])}" for f in want["inputs"]["files"]]
        assert m["spiece_model"]["path"] == "xlnetfake://sp.model"
        for key in ("params", "files", "totals", "stream_layout", "schema"):
            assert m[key] == want[key], key
        # a rerun finds every shard finished (remote sidecars) and rewrites the same manifest
        before = {n: os.path.getmtime(os.path.join(out, n)) for n in names}
        assert BP.build_pretrain_records_beam(
            "xlnetfake://corpus/*.txt", "xlnetfake://sp.model", "xlnetfake://records",
            F.small_config(), log=None) == m
        assert all(os.path.getmtime(os.path.join(out, n)) == t for n, t in before.items()
                   if n.endswith(".tfrecord"))
    finally:
        fake.scheme = classmethod(lambda cls: "xlnetfake-disabled")


def test_failing_shard_fails_the_pipeline_then_resume_completes(BP, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    real = PD.build_shard

    def flaky(task):
        if (task.pass_id, task.shard) == (1, 1):
            raise RuntimeError("injected worker failure")
        return real(task)

    monkeypatch.setattr(PD, "build_shard", flaky)
    with pytest.raises(Exception, match="injected worker failure"):
        BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), out, F.small_config(),
                                       log=None)
    names = os.listdir(out)
    assert manifest_lib.MANIFEST_NAME not in names  # no manifest for a partial build
    assert "train-1-00001-of-00003.tfrecord" not in names
    with pytest.raises(manifest_lib.ManifestError, match="no manifest.json"):
        PD.pretrain_dataset(out, **{k: S[k] for k in ("seq_len", "reuse_len", "num_predict",
                                                      "global_batch_size")}, num_replicas=2)
    finished = {n for n in names if n.endswith(".tfrecord")}  # kept, not rebuilt
    built = []
    monkeypatch.setattr(PD, "build_shard", lambda t: built.append(t.name) or real(t))
    BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), out, F.small_config(),
                                   log=None)
    assert "train-1-00001-of-00003.tfrecord" in built
    assert sorted(built) == sorted(set(BP.PD.record_file_name("train", p, s, 3)
                                       for p in range(2) for s in range(3)) - finished)
    _same_record_dirs(F.built_records(), out)


def test_manifest_step_refuses_a_missing_shard(BP, tmp_path):
    cfg = F.small_config()
    spec = BP.make_spec(F.CORPUS_GLOB, F.tiny_spm(), str(tmp_path), cfg)
    index = corpus_lib.index_documents(list(spec.files))
    stats = [PD._finished_stats(F.built_records(), n, spec.fingerprint)
             for n in spec.shard_names()]
    assert all(s is not None for s in stats)
    with pytest.raises(PD.BuildError, match="1 of 6 shard"):
        BP.write_manifest(stats[:3] + stats[4:], index, spec)
    assert not os.path.exists(tmp_path / manifest_lib.MANIFEST_NAME)
    BP.write_manifest(stats + stats[:1], index, spec)  # a retried duplicate is harmless
    assert filecmp.cmp(str(tmp_path / "manifest.json"),
                       os.path.join(F.built_records(), "manifest.json"), shallow=False)


def test_a_lost_document_fails_the_shard(BP, tmp_path):
    """Remote inputs reach a shard through a shuffle: a document that does not arrive is
    an error, never a shorter stream."""
    spec = BP.make_spec(F.CORPUS_GLOB, F.tiny_spm(), str(tmp_path), F.small_config(),
                        stage_io=True)
    index = corpus_lib.index_documents(list(spec.files))
    task = next(iter(BP.plan_tasks(index, spec)))
    docs = []
    for i, (f, a, b) in enumerate(zip(task.file_idx, task.start, task.end)):
        with open(spec.files[f], "rb") as fh:
            fh.seek(int(a))
            docs.append((i, fh.read(int(b - a))))
    fn = BP.BuildShardFn(spec)
    fn.setup()
    try:
        with pytest.raises(PD.BuildError, match="1 of .* documents did not arrive"):
            list(fn.process(((0, 0), {"task": [task], "docs": docs[:-1]})))
        assert not os.listdir(tmp_path)
        (stats,) = fn.process(((0, 0), {"task": [task], "docs": docs[::-1]}))
    finally:
        fn.teardown()
    name = task.name
    assert filecmp.cmp(str(tmp_path / name), os.path.join(F.built_records(), name), False)
    assert stats["num_examples"] == PD._finished_stats(F.built_records(), name,
                                                       spec.fingerprint)["num_examples"]


def test_bad_inputs_are_clear_errors(BP, tmp_path):
    with pytest.raises(PD.BuildError, match="already holds records built from other parameters"):
        BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), F.built_records(),
                                       F.small_config(seed=8), log=None)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\n\nbroken \xff line\n")
    for stage in (False, True):
        with pytest.raises(corpus_lib.CorpusError, match=r"bad\.txt: invalid UTF-8 at byte "
                                                        r"offset 18"):
            BP.build_pretrain_records_beam(str(bad), F.tiny_spm(), str(tmp_path / "o"),
                                           F.small_config(), stage_io=stage, log=None)
    with pytest.raises(PD.BuildError, match="num_shards=100 > number of documents"):
        BP.build_pretrain_records_beam(F.CORPUS_GLOB, F.tiny_spm(), str(tmp_path / "o2"),
                                       F.small_config(num_shards=100), log=None)


def _run_cli(module, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=F.REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_same_flags_as_local_plus_runner_and_pipeline_options(BP, tmp_path):
    flags = [f"--input_glob={F.CORPUS_GLOB}", f"--spiece_model={F.tiny_spm()}"]
    flags += [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in S.items()]
    out = str(tmp_path / "cli")
    r = _run_cli("tfrecords.beam.build_pretrain", *flags, f"--output_dir={out}",
                 "--runner=DirectRunner", "--", "--direct_num_workers=1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "manifest.json: " in r.stdout
    _same_record_dirs(F.built_records(), out)
    r = _run_cli("tfrecords.beam.build_pretrain", *flags, f"--output_dir={out}2",
                 "--num_tasks=2")
    assert r.returncode != 0 and "runner schedules the shards" in r.stderr


# ---- downstream builders -----------------------------------------------------------------------

def test_downstream_jobs_equal_local_builders_and_a_failing_job_fails(BP, tmp_path):
    from tfrecords.beam import downstream_pipeline as DP

    spm = F.tiny_spm()
    glue, mc = os.path.join(F.DATA_DIR, "glue", "MRPC"), os.path.join(F.DATA_DIR, "mc_wordnet")
    local = tmp_path / "local"
    classifier_data.build_classifier_records(
        processors.get_processor("mrpc"), glue, spm, str(local / "mrpc"),
        max_seq_length=32, eval_batch_size=8, seed=3)
    race_data.build_race_records(mc, spm, str(local / "mc"), max_seq_length=48,
                                 max_qa_length=16, eval_batch_size=8, seed=5, task="mc_wordnet")
    brown = os.path.join(F.REPO_ROOT, "data", "finetune", "brown_pos")
    tagging_data.build_tagging_records(brown, spm, str(local / "pos"), max_seq_length=32, doc_stride=16,
                                       splits=("train", "dev"), eval_batch_size=8, seed=4, tagset="universal")
    beam_out = tmp_path / "beam"
    jobs = DP.parse_jobs([
        f"classifier --task=mrpc --data_dir={glue} --spiece_model={spm} \\",
        f"  --output_dir={beam_out / 'mrpc'} --max_seq_length=32 --eval_batch_size=8 --seed=3",
        "# a comment",
        f"race --data_dir={mc} --spiece_model={spm} --output_dir={beam_out / 'mc'} "
        "--max_seq_length=48 --max_qa_length=16 --eval_batch_size=8 --seed=5 --task=mc_wordnet",
        f"tagging --data_dir={brown} --spiece_model={spm} --output_dir={beam_out / 'pos'} --max_seq_length=32 "
        "--doc_stride=16 --splits=train,dev --eval_batch_size=8 --seed=4 --tagset=universal",
    ])
    assert [j.builder for j in jobs] == ["classifier", "race", "tagging"]
    DP.run_jobs(jobs, log=None)
    for name in ("mrpc", "mc", "pos"):
        a, b = local / name, beam_out / name
        assert sorted(os.listdir(a)) == sorted(os.listdir(b))
        for n in os.listdir(a):
            assert filecmp.cmp(a / n, b / n, shallow=False), (name, n)
    with pytest.raises(ValueError, match="both write"):
        DP.parse_jobs([f"squad --spiece_model={spm} --output_dir=x",
                       f"race --spiece_model={spm} --output_dir=x"])
    bad = DP.parse_jobs([f"classifier --task=no_such_task --data_dir={glue} "
                         f"--spiece_model={spm} --output_dir={tmp_path / 'bad'}"])
    with pytest.raises(Exception, match="no_such_task"):
        DP.run_jobs(bad, log=None)
