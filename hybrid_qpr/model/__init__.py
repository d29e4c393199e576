"""torch-only model code: the SDML CNN (cnn.py), transformer fine-tuning modules and losses."""
