"""Reporting on what alignment/ and evaluation/ measure: figures, views, the explain page,
head importance, and the tables of compare and sweep-report."""
