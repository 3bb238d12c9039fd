"""Tests of the Holmes reference model (data, model, training)."""
