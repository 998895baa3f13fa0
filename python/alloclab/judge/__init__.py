"""Judging results: A/B comparisons marked only when the data say so
(compare), and the one engine behind every claim and verdict (verdict)."""
