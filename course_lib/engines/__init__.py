"""Pipeline engines that really train: the stage runtime both engines share, the local (one-process)
engine, the distributed (one process per rank) engine and the classic ``Pipe`` API."""
