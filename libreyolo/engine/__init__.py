"""Prediction engine: sources, predictor, Results, validator."""
