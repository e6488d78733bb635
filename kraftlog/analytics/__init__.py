"""Operator analytics: event tables and reports on top of the state histories."""
