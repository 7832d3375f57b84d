"""Measuring attention: word links and AER, forced alignment, attribution, attention statistics."""
