"""Reference models built on evidential-prvr through its public API only."""
