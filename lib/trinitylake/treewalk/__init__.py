"""Walking the tree: one frontier walk (`treewalk.frontier`) for every walk of the library."""
