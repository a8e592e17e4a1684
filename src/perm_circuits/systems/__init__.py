"""The seed papers' other systems (one subpackage or module each), reproduced with this library's tools."""
