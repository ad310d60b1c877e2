"""Checks of the oracle itself that need the library: it loads none of it, and its own protobuf
wire reader decodes the definitions exactly as the library's generated code does."""
