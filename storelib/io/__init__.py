"""The store interface and its implementations: ``Store`` over a local directory or an object store
(pyarrow FileSystem), the pyarrow-free local reader, direct I/O, object-store fragments, checksums
and in-place patches of continued files.
"""
