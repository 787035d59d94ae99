"""passage_jax: a JAX-native evaluator for constrained path planning on real terrain."""
__version__ = "0.1.0"
