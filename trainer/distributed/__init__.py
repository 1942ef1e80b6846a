"""Domain parallelism: one sample split across the ranks of a domain group (DESIGN.md)."""
