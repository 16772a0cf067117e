"""Calls: a public method's arguments, validated, turned into a function of one connection."""
