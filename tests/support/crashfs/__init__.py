"""crashfs: the crash simulator of rocketlake's tests (see lazyfs.py for the model and its limits).

lazyfs.LazyFS mounts it; durable.Recording replays a run; passthrough/recorder run inside the
FUSE process; availability says whether this machine can mount it.
"""
from .availability import unavailable_reason
from .durable import Recording
from .lazyfs import LazyFS, MountError

__all__ = ["LazyFS", "MountError", "Recording", "unavailable_reason"]
