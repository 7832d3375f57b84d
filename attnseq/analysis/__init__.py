"""Reporting on attention: figures, the alignment viewer, the explain page, head-importance
reports (the measurements they show are alignment/'s)."""
