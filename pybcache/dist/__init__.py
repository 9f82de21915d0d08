"""Work that outgrows one process, on Dask: :mod:`.cluster` (an embedded ``LocalCluster`` or an existing
scheduler), :mod:`.explore` (the explorer's schedule tree split by prefix) and :mod:`.sweep` (parameter
grids of race, stress, fio, explore and writeback)."""
