"""Analyses of annotations and results behind the paper's tables and figures."""
