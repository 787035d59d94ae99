"""`python -m cli <command>`: argument parsing and progress only; the work is in passage_jax."""
