"""Drafter training. The one entry is `hf_specdec.training.run.run(config)`: the config's class is the objective and
picks the trainer (`run.TRAINERS`). Trainers know bases, not pairs: a base gives the states of packed anchors
(`anchor_states`), a head's trainer trains that head on any base. Each module's docstring says what it holds."""
