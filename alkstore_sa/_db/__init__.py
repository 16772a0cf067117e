"""The database layer: statement builders, the operations over them, execution, connections."""
