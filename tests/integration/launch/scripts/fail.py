"""Trainer script for a launcher test: fails with a recognisable error."""

raise RuntimeError("bad input at row 7")
