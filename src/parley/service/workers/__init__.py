"""Workers: an agent's unit of delegated work, its children, results, takeovers, health and
the views over the tree.

Owns workers, their results and artifacts. May call the shared top-level services,
:mod:`parley.service.mail` and :mod:`parley.service.conversations` (a worker's turn is a task in
its work channel). Never calls :mod:`parley.service.meetings`.
"""
