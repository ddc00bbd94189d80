"""The book's machinery: the tiny test model, regenerated outputs, page macros, executed code
blocks."""
