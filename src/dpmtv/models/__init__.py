"""Model plumbing: loading checkpoints, one adapter per family, fingerprints."""
