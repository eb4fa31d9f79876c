"""Core of tvmgen: errors, logging, the model types every stage shares, the artifact manifest, shipped resources, the toolchain seam."""
