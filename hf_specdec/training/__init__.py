"""Drafter training. The one entry is `hf_specdec.training.run.run(config)`: the config's class is the objective and
picks the trainer (`run.TRAINERS`). Around it: config.py, target.py (the frozen target), sequences.py + data.py +
corpora.py (training sequences, cached target features, draft vocabulary), packing.py, losses.py, trainer.py
(DFlash) and the other objectives' trainers (specopd.py, sequential_opd.py, dcoco.py, dblast.py), counters.py (what
every run counts), checkpoint.py, lora.py, saving.py, publishing.py, throughput.py."""
