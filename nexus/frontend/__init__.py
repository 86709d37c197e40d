"""Frontends: the with-statement DSL, @nx.script, and the model importers."""
