"""Corpus-scale jobs on Apache Beam (`pip install "keras-transformer[beam]"`).

- `prepare_data.prepare_data`: tokenizes a corpus once into TFRecord
  shards for `train.py --dataset prepared:DIR` (`keras-transformer prepare-data`).
- `translate_corpus.translate_corpus`: translates many files with an
  export, for back-translation (`keras-transformer translate-corpus`).

Both run in this process by default (Beam's FnApiRunner; add
`--direct_running_mode=multi_processing --direct_num_workers=N` for N local
worker processes) and on Dataflow, Flink or Spark by Beam's pipeline
options (`runner.pipeline_options`). Only the modules of this package
import `apache_beam`.
"""
