"""The record builders as Apache Beam pipelines (DirectRunner, Dataflow, Flink, Spark).

Modules (they import `apache_beam`; install `requirements-beam.txt`):
  pretrain_pipeline   the pretraining builder; same records and manifest.json, byte for
                      byte, as `tfrecords.pretrain.writer.build_pretrain_records`
  build_pretrain      its CLI: the flags of `tfrecords/build_pretrain.py`, `--runner`, and
                      Beam pipeline options after `--`
  downstream_pipeline the classification / SQuAD / RACE builders, one build per task
  fs                  local or `FileSystems` paths (gs://, s3://, hdfs://) and staging

Every pipeline calls the local builders' own functions (no second copy of the logic).
`apache-beam` caps protobuf below 7 while the runtime pins protobuf 7: the Beam builders
run in their own environment (requirements-beam.txt: the runtime pins with protobuf 6).
"""
