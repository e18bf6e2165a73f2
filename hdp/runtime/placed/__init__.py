"""A placed model: the file (:mod:`~hdp.runtime.placed.model`: write, read, compile under HETERO or
the executor) and hdp's concurrent executor over its device subgraphs
(:mod:`~hdp.runtime.placed.executor`, cut by :mod:`~hdp.runtime.placed.split`). The lowest runtime
package: nothing here measures."""
