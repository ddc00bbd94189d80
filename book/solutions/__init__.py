"""Worked solutions to the lesson exercises, kept out of docs/ so a reader does not meet them by
accident."""
