"""Runnable examples: ``alkstore worker examples.tasks:worker`` and the demo app."""
