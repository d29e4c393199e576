"""Training loops (torch): ``cnn`` trains the SDML CNN and its baselines, ``transformer``
fine-tunes MiniLM. Never imported by ingest or query."""
